package usage_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/usage"
)

var (
	ctx = context.Background()
	op  = audit.Actor{Kind: audit.ActorUser, ID: "op@example.com", Name: "Operator"}
	t0  = time.Date(2026, 11, 30, 9, 40, 0, 0, time.UTC)
)

type env struct {
	db    *gorm.DB
	store *usage.Store
	ts    *tenants.Store
}

func eachDB(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			fn(t, &env{db: d.DB, store: usage.NewStore(d.DB, func() time.Time { return t0 }), ts: tenants.NewStore(d.DB, nil)})
		})
	}
}

// priceFrom sets p as an operator did at p.EffectiveFrom: a price is never
// back-dated, so the store's clock stands there.
func priceFrom(t testing.TB, db *gorm.DB, p usage.Price) usage.Price {
	t.Helper()
	saved, err := usage.NewStore(db, func() time.Time { return p.EffectiveFrom }).SetPrice(ctx, op, p)
	if err != nil {
		t.Fatalf("set price from %s: %v", p.EffectiveFrom, err)
	}
	return saved
}

func (e *env) tenant(t *testing.T, slug string) tenants.Tenant {
	t.Helper()
	tn, err := e.ts.CreateTenant(ctx, op, slug, slug)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func (e *env) open(t *testing.T, tenantID, id string, vcpus, mib int, at time.Time) {
	t.Helper()
	err := e.db.Transaction(func(tx *gorm.DB) error {
		return usage.Open(tx, usage.Meter{SandboxID: id, TenantID: tenantID, Template: "debian", UserID: "dev@example.com", UserName: "Dev",
			VCPUs: vcpus, MemoryMiB: mib, StartedAt: at})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) observe(t *testing.T, id string, s *usage.Sample, end *time.Time) usage.Meter {
	t.Helper()
	m, err := e.store.Observe(ctx, id, s, end)
	if err != nil {
		t.Fatalf("Observe(%s) = %v", id, err)
	}
	return m
}

func (e *env) entries(t *testing.T, tenantID, id string) []usage.Entry {
	t.Helper()
	out, err := e.store.Entries(ctx, tenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sum(es []usage.Entry) (s usage.Sums) {
	for _, e := range es {
		s.AllocVCPUMS += e.AllocVCPUMS
		s.AllocMiBMS += e.AllocMiBMS
		s.WallMS += e.WallMS
		s.CPUNS += e.CPUNS
		s.EgressUpBytes += e.EgressUpBytes
		s.EgressDownBytes += e.EgressDownBytes
		s.MemoryPeakBytes = max(s.MemoryPeakBytes, e.MemoryPeakBytes)
	}
	return s
}

// A sandbox running across an hour boundary: allocation split by the time in
// each hour, measured CPU in proportion, sums exact; the same sample again
// (a restart, a second replica) adds nothing; the close accounts the last
// interval once.
func TestMeterAccountsOnceAcrossHours(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "meter-hours")
		e.open(t, tn.ID, "sb-1", 2, 512, t0) // 09:40
		s1 := &usage.Sample{At: t0.Add(10 * time.Minute), CPUNS: int64(30 * time.Second), MemoryPeakBytes: 100 << 20}
		e.observe(t, "sb-1", s1, nil)
		// 09:50 -> 10:10: crosses 10:00.
		s2 := &usage.Sample{At: t0.Add(30 * time.Minute), CPUNS: int64(90 * time.Second), MemoryPeakBytes: 200 << 20}
		e.observe(t, "sb-1", s2, nil)
		before := sum(e.entries(t, tn.ID, "sb-1"))
		e.observe(t, "sb-1", s2, nil) // seen again
		e.observe(t, "sb-1", s1, nil) // an older one, late
		if got := sum(e.entries(t, tn.ID, "sb-1")); got != before {
			t.Fatalf("Got(sums after repeated samples) = %+v; want unchanged %+v", got, before)
		}
		end := t0.Add(35 * time.Minute)
		final := &usage.Sample{At: t0.Add(40 * time.Minute), CPUNS: int64(100 * time.Second), MemoryPeakBytes: 250 << 20}
		m := e.observe(t, "sb-1", final, &end)
		if m.ClosedAt == nil || !m.ClosedAt.Equal(end) {
			t.Fatalf("Got(ClosedAt) = %v; want %v", m.ClosedAt, end)
		}
		// Closed: a later sample adds no allocation; growth of the counters
		// still counts (there is none here).
		e.observe(t, "sb-1", &usage.Sample{At: t0.Add(50 * time.Minute), CPUNS: int64(100 * time.Second)}, nil)
		later := end.Add(time.Hour)
		e.observe(t, "sb-1", nil, &later)

		es := e.entries(t, tn.ID, "sb-1")
		if len(es) != 2 {
			t.Fatalf("Got(%d ledger rows) = %+v; want 2 (09:00 and 10:00)", len(es), es)
		}
		if !es[0].PeriodStart.Equal(t0.Truncate(time.Hour)) || !es[1].PeriodStart.Equal(t0.Truncate(time.Hour).Add(time.Hour)) {
			t.Errorf("Got(periods) = %v, %v; want 09:00 and 10:00", es[0].PeriodStart, es[1].PeriodStart)
		}
		if es[0].WallMS != (20 * time.Minute).Milliseconds() {
			t.Errorf("Got(wall ms 09:00) = %d; want 20 min", es[0].WallMS)
		}
		if es[1].WallMS != (15 * time.Minute).Milliseconds() {
			t.Errorf("Got(wall ms 10:00) = %d; want 15 min", es[1].WallMS)
		}
		s := sum(es)
		if s.WallMS != (35*time.Minute).Milliseconds() || s.AllocVCPUMS != 2*s.WallMS || s.AllocMiBMS != 512*s.WallMS {
			t.Errorf("Got(sums) = %+v; want 35 min wall, x2 vCPU, x512 MiB", s)
		}
		if s.CPUNS != int64(100*time.Second) {
			t.Errorf("Got(cpu ns) = %d; want exactly the final cumulative %d", s.CPUNS, int64(100*time.Second))
		}
		// 09:50-10:10 moved 60 s of CPU: 10 min in each hour -> 30 s each.
		if es[0].CPUNS != int64(60*time.Second) || es[1].CPUNS != int64(40*time.Second) {
			t.Errorf("Got(cpu per hour) = %d, %d; want 60 s, 40 s", es[0].CPUNS, es[1].CPUNS)
		}
		if s.MemoryPeakBytes != 250<<20 {
			t.Errorf("Got(peak) = %d; want %d", s.MemoryPeakBytes, 250<<20)
		}
	})
}

// A sandbox whose VM vanished is closed at its last sample: what was not
// seen is not billed.
func TestMeterClosesAtLastSampleWhenLost(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "meter-lost")
		e.open(t, tn.ID, "sb-lost", 1, 256, t0)
		e.observe(t, "sb-lost", &usage.Sample{At: t0.Add(5 * time.Second), CPUNS: 1e9}, nil)
		m := e.observe(t, "sb-lost", nil, &time.Time{})
		if m.ClosedAt == nil || !m.ClosedAt.Equal(t0.Add(5*time.Second)) {
			t.Fatalf("Got(ClosedAt) = %v; want the last sample %v", m.ClosedAt, t0.Add(5*time.Second))
		}
		if s := sum(e.entries(t, tn.ID, "sb-lost")); s.WallMS != 5000 || s.CPUNS != 1e9 {
			t.Errorf("Got(sums) = %+v; want 5 s wall, 1 s CPU", s)
		}
		if _, err := e.store.Observe(ctx, "never-ran", nil, nil); !errors.Is(err, usage.ErrNoMeter) {
			t.Errorf("Got(Observe(no meter)) = %v; want ErrNoMeter", err)
		}
	})
}

// Egress bytes land in the hour the connection ended, with the sandbox's
// template and user; another tenant's sandbox id gets no row of its meter.
func TestEgressAccounting(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a, b := e.tenant(t, "egress-a"), e.tenant(t, "egress-b")
		e.open(t, a.ID, "sb-a", 1, 256, t0)
		for _, c := range []struct {
			tenant string
			up     int64
		}{{a.ID, 1000}, {a.ID, 500}, {b.ID, 7}} {
			err := e.db.Transaction(func(tx *gorm.DB) error {
				return usage.Egress(tx, c.tenant, "sb-a", c.up, 2*c.up, t0.Add(time.Minute))
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		got := sum(e.entries(t, a.ID, "sb-a"))
		if got.EgressUpBytes != 1500 || got.EgressDownBytes != 3000 {
			t.Errorf("Got(egress of tenant a) = %d up, %d down; want 1500, 3000", got.EgressUpBytes, got.EgressDownBytes)
		}
		if es := e.entries(t, a.ID, "sb-a"); len(es) != 1 || es[0].Template != "debian" {
			t.Errorf("Got(ledger rows) = %+v; want one, with the meter's template", es)
		}
	})
}

// Prices: the tenant's override wins from its effective time on, the
// platform's applies otherwise, DefaultPrice with no book; bad prices are
// refused naming the field, and nothing is written.
func TestPrices(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "prices")
		platform := priceFrom(t, e.db, usage.Price{Currency: "EUR", VCPUSecond: 0.00002, GiBSecond: 0.000005,
			EffectiveFrom: t0.Add(-24 * time.Hour)})
		if _, err := e.store.SetPrice(ctx, op, usage.Price{TenantID: tn.ID, Currency: "EUR", VCPUSecond: 0.00001,
			EffectiveFrom: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		ps, err := e.store.LoadPrices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name   string
			tenant string
			at     time.Time
			want   float64
		}{
			{"before any book", tn.ID, t0.Add(-48 * time.Hour), usage.DefaultPrice().VCPUSecond},
			{"platform", tn.ID, t0, platform.VCPUSecond},
			{"tenant override", tn.ID, t0.Add(2 * time.Hour), 0.00001},
			{"other tenant", "other", t0.Add(2 * time.Hour), platform.VCPUSecond},
		} {
			if got := ps.At(c.tenant, c.at).VCPUSecond; got != c.want {
				t.Errorf("%s: Got(At) = %v; want %v", c.name, got, c.want)
			}
		}
		before := dbtest.Count(t, e.db)
		for _, bad := range []struct {
			p     usage.Price
			field string
		}{
			{usage.Price{Currency: "dollars"}, "currency"},
			{usage.Price{Currency: "USD", VCPUSecond: -1}, "vcpu_second"},
			{usage.Price{Currency: "USD", EgressGB: math.NaN()}, "egress_gb"},
			{usage.Price{Currency: "USD", GiBSecond: 5000}, "gib_second"},
		} {
			_, err := e.store.SetPrice(ctx, op, bad.p)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != bad.field {
				t.Errorf("Got(SetPrice(%+v)) = %v; want a field error on %s", bad.p, err, bad.field)
			}
		}
		if _, err := e.store.SetPrice(ctx, op, usage.Price{TenantID: "no-such-tenant", Currency: "USD"}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(SetPrice(missing tenant)) = %v; want ErrNotFound", err)
		}
		if ok, diff := dbtest.Equal(before, dbtest.Count(t, e.db)); !ok {
			t.Errorf("Got(rows after refused prices) changed: %s; want nothing written", diff)
		}
	})
}

// The export: FOCUS columns, one row per non-zero quantity, sums equal to
// the ledger, priced at the price in force at each hour, scoped to the
// tenant; the CSV and JSON say the same.
func TestExportMatchesLedger(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a, b := e.tenant(t, "export-a"), e.tenant(t, "export-b")
		priceFrom(t, e.db, usage.Price{Currency: "USD", VCPUSecond: 0.001, GiBSecond: 0.0001,
			CPUSecond: 0.01, EgressGB: 0.5, EffectiveFrom: t0.Add(-time.Hour)})
		e.open(t, a.ID, "sb-a1", 2, 1024, t0)
		e.observe(t, "sb-a1", &usage.Sample{At: t0.Add(50 * time.Minute), CPUNS: int64(7 * time.Second)}, nil)
		end := t0.Add(55 * time.Minute)
		e.observe(t, "sb-a1", &usage.Sample{At: end, CPUNS: int64(9 * time.Second)}, &end)
		if err := e.db.Transaction(func(tx *gorm.DB) error {
			return usage.Egress(tx, a.ID, "sb-a1", 3e8, 2e8, t0.Add(time.Minute))
		}); err != nil {
			t.Fatal(err)
		}
		e.open(t, b.ID, "sb-b1", 1, 256, t0)
		e.observe(t, "sb-b1", &usage.Sample{At: t0.Add(time.Minute), CPUNS: 1e9}, nil)

		r := usage.Range{From: t0.Add(-24 * time.Hour), To: t0.Add(24 * time.Hour)}
		tot, err := e.store.Totals(ctx, a.ID, r)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		res, err := e.store.Export(ctx, &buf, usage.ExportQuery{TenantID: a.ID, Range: r, Format: usage.FormatCSV})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(&buf).ReadAll()
		if err != nil {
			t.Fatalf("export does not parse as CSV: %v", err)
		}
		if got := recs[0]; len(got) != len(usage.Columns) || got[0] != "BillingPeriodStart" || got[len(got)-1] != "Tags" {
			t.Fatalf("Got(header) = %v; want usage.Columns", got)
		}
		col := map[string]int{}
		for i, c := range recs[0] {
			col[c] = i
		}
		byUnit, cost := map[string]float64{}, usage.Money{}
		for _, rec := range recs[1:] {
			if rec[col["SubAccountId"]] != a.ID {
				t.Errorf("Got(row of tenant %s) in tenant %s's export", rec[col["SubAccountId"]], a.ID)
			}
			q, _ := strconv.ParseFloat(rec[col["ConsumedQuantity"]], 64)
			c, err := usage.ParseMoney(rec[col["BilledCost"]])
			if err != nil {
				t.Errorf("Got(BilledCost) = %q: %v; want an exact decimal", rec[col["BilledCost"]], err)
			}
			byUnit[rec[col["ConsumedUnit"]]] += q
			cost = cost.Add(c)
		}
		if int64(len(recs)-1) != res.Rows || res.LedgerRows != 2 {
			t.Errorf("Got(result) = %+v; want %d rows from 2 ledger rows (09:00, 10:00)", res, len(recs)-1)
		}
		for unit, want := range map[string]float64{"vCPU-Seconds": tot.VCPUSeconds(), "GiB-Seconds": tot.GiBSeconds(),
			"CPU-Seconds": tot.CPUSeconds(), "GB": tot.EgressGB()} {
			if math.Abs(byUnit[unit]-want) > 1e-9*math.Max(1, want) {
				t.Errorf("Got(export sum of %s) = %v; want the ledger's %v", unit, byUnit[unit], want)
			}
		}
		// 55 min × 2 vCPUs × 0.001 + 55 min × 1 GiB × 0.0001 + 9 CPU-s × 0.01 + 0.5 GB × 0.5, exactly.
		if want := "7.27"; cost.String() != want || tot.Cost.String() != want {
			t.Errorf("Got(cost) export %v, totals %v; want %s in both", cost, tot.Cost, want)
		}

		buf.Reset()
		if _, err := e.store.Export(ctx, &buf, usage.ExportQuery{Range: r, Format: usage.FormatJSON}); err != nil {
			t.Fatal(err)
		}
		var rows []map[string]any
		if err := json.Unmarshal(buf.Bytes(), &rows); err != nil {
			t.Fatalf("JSON export does not parse: %v\n%s", err, buf.String())
		}
		tenantsSeen := map[string]bool{}
		for _, row := range rows {
			tenantsSeen[row["SubAccountName"].(string)] = true
			if _, ok := row["ConsumedQuantity"].(float64); !ok {
				t.Errorf("Got(ConsumedQuantity) = %T; want a JSON number", row["ConsumedQuantity"])
			}
			if tags, ok := row["Tags"].(map[string]any); !ok || tags["template"] != "debian" || tags["user_name"] != "Dev" {
				t.Errorf("Got(Tags) = %v; want an object with the template", row["Tags"])
			}
		}
		if !tenantsSeen["export-a"] || !tenantsSeen["export-b"] {
			t.Errorf("Got(tenants in the all-tenant export) = %v; want both", tenantsSeen)
		}
		for _, bad := range []usage.ExportQuery{{Range: r, Format: "xml"}, {Range: usage.Range{From: t0, To: t0}, Format: "csv"}} {
			if _, err := e.store.Export(ctx, &bytes.Buffer{}, bad); err == nil {
				t.Errorf("Got(Export(%+v)) = nil; want an error", bad)
			}
		}
	})
}

// The monthly CPU quota counts the month's measured CPU only.
func TestCPUSecondsThisMonth(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "cpu-month")
		lastMonth := usage.MonthStart(t0).Add(-2 * time.Hour)
		e.open(t, tn.ID, "old", 1, 128, lastMonth)
		e.observe(t, "old", &usage.Sample{At: lastMonth.Add(time.Hour), CPUNS: int64(time.Hour)}, nil)
		e.open(t, tn.ID, "new", 2, 128, t0)
		e.observe(t, "new", &usage.Sample{At: t0.Add(45 * time.Minute), CPUNS: int64(90 * time.Minute)}, nil)
		got, err := e.store.CPUSecondsThisMonth(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got != 5400 {
			t.Errorf("Got(CPUSecondsThisMonth) = %v; want 5400", got)
		}
		q := tenants.DefaultQuota()
		q.MaxCPUHoursMonthly = 1
		var qe *errdefs.QuotaError
		if err := q.CheckCPUHours(got); !errors.As(err, &qe) || qe.Quota != tenants.QuotaMaxCPUHoursMonthly {
			t.Errorf("Got(CheckCPUHours(1.5 h) under 1 h) = %v; want a quota error naming %s", err, tenants.QuotaMaxCPUHoursMonthly)
		}
		q.MaxCPUHoursMonthly = 2
		if err := q.CheckCPUHours(got); err != nil {
			t.Errorf("Got(CheckCPUHours(1.5 h) under 2 h) = %v; want nil", err)
		}
		for _, c := range []struct {
			cpu        float64
			warn, over bool
		}{{got, false, false}, {6000, true, false}, {7200, true, true}} {
			for _, l := range usage.QuotaLines(q, tenants.Usage{}, c.cpu) {
				if l.Name == tenants.QuotaMaxCPUHoursMonthly && (l.Warn != c.warn || l.Over != c.over) {
					t.Errorf("Got(QuotaLines(%v s of 2 h)) = %+v; want warn %v over %v", c.cpu, l, c.warn, c.over)
				}
			}
		}
	})
}

// Many samples at odd instants lose no millisecond: the allocation billed is
// the lifetime, whole milliseconds, however many samples cut it.
func TestMeterWallIsExactOverManySamples(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "meter-exact")
		start := t0.Add(1234567 * time.Nanosecond)
		e.open(t, tn.ID, "sb-x", 1, 128, start)
		at := start
		for i := 0; i < 200; i++ {
			at = at.Add(1700*time.Microsecond + 333*time.Nanosecond)
			e.observe(t, "sb-x", &usage.Sample{At: at, CPUNS: int64(i) * 1000}, nil)
		}
		end := at.Add(999 * time.Microsecond)
		m := e.observe(t, "sb-x", nil, &end)
		want := m.ClosedAt.Sub(usage.Meter{StartedAt: start}.StartedAt.Truncate(time.Microsecond)).Milliseconds()
		if got := sum(e.entries(t, tn.ID, "sb-x")).WallMS; got != want {
			t.Errorf("Got(wall ms over 200 samples) = %d; want the lifetime %d", got, want)
		}
	})
}
