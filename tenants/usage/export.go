package usage

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/stockade-dev/stockade/tenants/csvexport"
)

// Columns are the export's columns, in order: FOCUS names
// (https://focus.finops.org) so a FinOps tool reads them as they are. They
// are stable: new columns are only ever appended.
//
//	BillingPeriodStart  first instant of the calendar month (UTC) of the charge
//	BillingPeriodEnd    first instant of the next month
//	ChargePeriodStart   the ledger hour the usage happened in (volumes: the start of the part
//	                    of a UTC day the volume had one size at one price)
//	ChargePeriodEnd     one hour later (volumes: the end of that part)
//	ChargeCategory      always "Usage"
//	ChargeDescription   what was metered, in words
//	SubAccountId        the tenant's id
//	SubAccountName      the tenant's slug
//	ResourceId          the sandbox's id (volumes: the volume's id)
//	ResourceType        "Sandbox" or "Volume"
//	ServiceName         "Stockade Sandboxes" or "Stockade Volumes"
//	SkuId               the meter: vcpu-allocated, memory-allocated, cpu-measured, egress,
//	                    volume-storage
//	ConsumedQuantity    the quantity, in ConsumedUnit (an exact decimal; GiB-Months cut at
//	                    13 decimals)
//	ConsumedUnit        vCPU-Seconds, GiB-Seconds, CPU-Seconds, GB (10^9 bytes) or GiB-Months
//	                    (a GiB provisioned for a whole UTC calendar month, whatever its length)
//	ListUnitPrice       the price book's price per ConsumedUnit in force at ChargePeriodStart
//	                    (an exact decimal, at most 9 decimals)
//	BilledCost          ConsumedQuantity x ListUnitPrice, exactly (no rounding)
//	BillingCurrency     the price book's ISO 4217 currency
//	Tags                JSON object: tenant (slug), template, user (id), user_name
//	                    (volumes: tenant, volume (name), size_gib)
var Columns = []string{
	"BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory",
	"ChargeDescription", "SubAccountId", "SubAccountName", "ResourceId", "ResourceType", "ServiceName", "SkuId",
	"ConsumedQuantity", "ConsumedUnit", "ListUnitPrice", "BilledCost", "BillingCurrency", "Tags",
}

// Export formats.
const (
	FormatCSV  = "csv"
	FormatJSON = "json"
)

// Meters (SkuId) and their units.
const (
	SkuVCPU   = "vcpu-allocated"
	SkuMemory = "memory-allocated"
	SkuCPU    = "cpu-measured"
	SkuEgress = "egress"
)

// ExportQuery says what to export.
type ExportQuery struct {
	// TenantID "" exports every tenant (operators only: the caller checks).
	TenantID string
	Range    Range
	Format   string
}

// ExportResult says what an export wrote.
type ExportResult struct {
	LedgerRows int64 // ledger rows read
	Rows       int64 // export rows written
}

// Export streams the ledger rows of q as FOCUS rows in CSV or JSON (an
// array), one row per metered quantity that is not zero. It reads the
// ledger row by row and writes as it goes, flushing w when it can, so a
// large period never builds in memory.
func (s *Store) Export(ctx context.Context, w io.Writer, q ExportQuery) (ExportResult, error) {
	var res ExportResult
	if q.Format != FormatCSV && q.Format != FormatJSON {
		return res, fmt.Errorf("export format %q: must be csv or json", q.Format)
	}
	if err := q.Range.Check(); err != nil {
		return res, err
	}
	ps, err := s.LoadPrices(ctx)
	if err != nil {
		return res, err
	}
	slugs := map[string]string{}
	var tn []struct{ ID, Slug string }
	if err := s.db.WithContext(ctx).Table("tenants").Select("id, slug").Scan(&tn).Error; err != nil {
		return res, fmt.Errorf("export usage: tenants: %w", err)
	}
	for _, t := range tn {
		slugs[t.ID] = t.Slug
	}
	// Who started the sandboxes, by name (a few rows: one per user).
	var people []struct {
		TenantID string `gorm:"column:tenant_id"`
		UserID   string `gorm:"column:user_id"`
		UserName string `gorm:"column:user_name"`
	}
	pq := s.db.WithContext(ctx).Model(&Meter{}).Distinct("tenant_id", "user_id", "user_name").Where("user_name <> ''")
	if q.TenantID != "" {
		pq = pq.Where("tenant_id = ?", q.TenantID)
	}
	if err := pq.Scan(&people).Error; err != nil {
		return res, fmt.Errorf("export usage: user names: %w", err)
	}
	names := map[[2]string]string{}
	for _, p := range people {
		names[[2]string{p.TenantID, p.UserID}] = p.UserName
	}
	db := s.db.WithContext(ctx).Model(&Entry{}).Where("period_start >= ? AND period_start < ?", ts(q.Range.From), ts(q.Range.To))
	if q.TenantID != "" {
		db = db.Where("tenant_id = ?", q.TenantID)
	}
	rows, err := db.Select("tenant_id, sandbox_id, period_start, template, user_id, alloc_vcpu_ms, alloc_mib_ms, cpu_ns, " +
		"egress_up_bytes, egress_down_bytes").Order("period_start, tenant_id, sandbox_id").Rows()
	if err != nil {
		return res, fmt.Errorf("export usage: %w", err)
	}
	defer rows.Close()

	bw := bufio.NewWriterSize(w, 64<<10)
	enc := newEncoder(bw, q.Format)
	if err := enc.begin(); err != nil {
		return res, err
	}
	flush := func() error {
		if enc.csv != nil {
			enc.csv.Flush()
			if err := enc.csv.Error(); err != nil {
				return err
			}
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return nil
	}
	var e Entry
	rec := make([]string, len(Columns))
	tagsOf := map[[3]string]string{} // the same few combinations come back row after row
	var scratch []byte
	for rows.Next() {
		if err := rows.Scan(&e.TenantID, &e.SandboxID, &e.PeriodStart, &e.Template, &e.UserID, &e.AllocVCPUMS,
			&e.AllocMiBMS, &e.CPUNS, &e.EgressUpBytes, &e.EgressDownBytes); err != nil {
			return res, fmt.Errorf("export usage: %w", err)
		}
		res.LedgerRows++
		p := ps.At(e.TenantID, e.PeriodStart)
		start := e.PeriodStart.UTC()
		bill := MonthStart(start)
		key := [3]string{e.TenantID, e.Template, e.UserID}
		tags, ok := tagsOf[key]
		if !ok {
			b, _ := json.Marshal(map[string]string{"tenant": slugs[e.TenantID], "template": e.Template, "user": e.UserID,
				"user_name": names[[2]string{e.TenantID, e.UserID}]})
			tags = string(b)
			if len(tagsOf) > 10000 {
				clear(tagsOf)
			}
			tagsOf[key] = tags
		}
		sums := Sums{AllocVCPUMS: e.AllocVCPUMS, AllocMiBMS: e.AllocMiBMS, CPUNS: e.CPUNS,
			EgressUpBytes: e.EgressUpBytes, EgressDownBytes: e.EgressDownBytes}
		for i, l := range sums.lines(p) {
			if l.qty == 0 {
				continue
			}
			m := &meters[i]
			// Exact decimals: the quantity in its unit, the unit price, and
			// their product (no float, no rounding).
			scratch = l.appendQuantity(scratch[:0])
			qty := string(scratch)
			scratch = appendDecimal(scratch[:0], 0, l.price, PriceScale)
			price := string(scratch)
			c := l.cost()
			scratch = appendDecimal(scratch[:0], c.hi, c.lo, MoneyScale)
			rec = append(rec[:0], rfc(bill), rfc(bill.AddDate(0, 1, 0)), rfc(start), rfc(start.Add(Period)), "Usage",
				m.desc, e.TenantID, slugs[e.TenantID], e.SandboxID, "Sandbox", "Stockade Sandboxes", m.sku,
				qty, m.unit, price, string(scratch), p.Currency, tags)
			if err := enc.row(rec); err != nil {
				return res, fmt.Errorf("export usage: %w", err)
			}
			res.Rows++
		}
		if res.LedgerRows%2000 == 0 {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if err := flush(); err != nil {
				return res, fmt.Errorf("export usage: %w", err)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("export usage: %w", err)
	}
	// Volume storage, after the sandboxes' rows: one row per volume, size,
	// UTC day and price.
	vc, err := s.VolumeCharges(ctx, q.TenantID, q.Range)
	if err != nil {
		return res, fmt.Errorf("export usage: %w", err)
	}
	for _, c := range vc {
		if c.qty == 0 {
			continue
		}
		b, _ := json.Marshal(map[string]string{"tenant": slugs[c.TenantID], "volume": c.VolumeName, "size_gib": strconv.Itoa(c.SizeGiB)})
		bill := MonthStart(c.From)
		rec = append(rec[:0], rfc(bill), rfc(bill.AddDate(0, 1, 0)), rfc(c.From), rfc(c.To), "Usage",
			volumeDesc, c.TenantID, slugs[c.TenantID], c.VolumeID, volumeResource, volumeService, SkuVolume,
			c.GiBMonths(), VolumeUnit, c.UnitPrice(), c.Cost.String(), c.Price.Currency, string(b))
		if err := enc.row(rec); err != nil {
			return res, fmt.Errorf("export usage: %w", err)
		}
		res.Rows++
	}
	if err := enc.end(); err != nil {
		return res, err
	}
	return res, flush()
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// meters are the SKUs in the order of Sums.lines.
var meters = [4]struct{ sku, desc, unit string }{
	{SkuVCPU, "vCPUs allocated to the sandbox", "vCPU-Seconds"},
	{SkuMemory, "memory allocated to the sandbox", "GiB-Seconds"},
	{SkuCPU, "CPU time the sandbox used", "CPU-Seconds"},
	{SkuEgress, "traffic through the egress gateway", "GB"},
}

// encoder writes rows in one format.
type encoder struct {
	w      *bufio.Writer
	format string
	csv    *csvexport.Writer
	n      int
	buf    []byte
}

func newEncoder(w *bufio.Writer, format string) *encoder {
	e := &encoder{w: w, format: format}
	if format == FormatCSV {
		e.csv = csvexport.NewWriter(w)
	}
	return e
}

func (e *encoder) begin() error {
	if e.csv != nil {
		return e.csv.Write(Columns)
	}
	_, err := e.w.WriteString("[")
	return err
}

// numeric columns are JSON numbers; Tags is a JSON object.
var jsonKind = func() map[int]byte {
	m := map[int]byte{}
	for i, c := range Columns {
		switch c {
		case "ConsumedQuantity", "ListUnitPrice", "BilledCost":
			m[i] = 'n'
		case "Tags":
			m[i] = 'o'
		}
	}
	return m
}()

func (e *encoder) row(rec []string) error {
	if e.csv != nil {
		return e.csv.Write(rec)
	}
	if e.n > 0 {
		e.w.WriteString(",")
	}
	e.n++
	e.buf = append(e.buf[:0], "\n{"...)
	for i, v := range rec {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.buf = append(e.buf, jsonKeys[i]...)
		switch jsonKind[i] {
		case 'n', 'o':
			e.buf = append(e.buf, v...)
		default:
			e.buf = appendJSONString(e.buf, v)
		}
	}
	e.buf = append(e.buf, '}')
	_, err := e.w.Write(e.buf)
	return err
}

// jsonKeys are the columns as JSON object keys with their colon.
var jsonKeys = func() []string {
	out := make([]string, len(Columns))
	for i, c := range Columns {
		out[i] = string(appendJSONString(nil, c)) + ":"
	}
	return out
}()

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, the rest (UTF-8 included) as it is.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func (e *encoder) end() error {
	if e.csv != nil {
		e.csv.Flush()
		return e.csv.Error()
	}
	_, err := e.w.WriteString("\n]\n")
	return err
}
