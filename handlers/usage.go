package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/views"
)

// usageTopN is how many lines each top list (page and summary) holds.
const usageTopN = 10

// usageMaxSpan bounds the period of the page and the summary, which hold
// a line per day; exports stream and take any period.
const usageMaxSpan = 366 * 24 * time.Hour

// usageSampleLimit bounds the samples a sandbox's charts read: an hour at
// one every 5 s.
const usageSampleLimit = 720

// Kept so its call sites stay as they are; every service is required
// (handlers.New), so it never fails.
func (h *Handlers) meteredUsage() (*usage.Store, error) { return h.usage, nil }

// usagePeriodOf reads ?from=&to= as a period [from, to): each an RFC 3339
// time or a date (YYYY-MM-DD, UTC), to inclusive of its whole day. Without
// either, the current calendar month; with one, the calendar month it
// starts or ends. Bad input is a 400 naming the field.
func usagePeriodOf(c echo.Context, now time.Time, maxSpan time.Duration) (usage.Range, error) {
	from, ferr := usageTime("from", c.QueryParam("from"), false)
	to, terr := usageTime("to", c.QueryParam("to"), true)
	if err := errors.Join(ferr, terr); err != nil {
		return usage.Range{}, err // both ends named, when both are wrong
	}
	switch {
	case from.IsZero() && to.IsZero():
		from = usage.MonthStart(now)
		to = from.AddDate(0, 1, 0)
	case from.IsZero():
		from = usage.MonthStart(to.Add(-time.Nanosecond))
	case to.IsZero():
		to = usage.MonthStart(from).AddDate(0, 1, 0)
	}
	if !to.After(from) {
		return usage.Range{}, &errdefs.MalformedError{Field: "to", Detail: "must be after from (the period ends before it starts)"}
	}
	if maxSpan > 0 && to.Sub(from) > maxSpan {
		return usage.Range{}, &errdefs.MalformedError{Field: "to", Detail: fmt.Sprintf("the period may span at most %d days here (exports take any period)", int(maxSpan.Hours()/24))}
	}
	return usage.Range{From: from, To: to}, nil
}

// usageTime parses one end of a period; a date that ends a period means the
// end of that day.
func usageTime(field, s string, end bool) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		if end {
			t = t.AddDate(0, 0, 1)
		}
		return t.UTC(), nil
	}
	return time.Time{}, &errdefs.MalformedError{Field: field, Detail: "must be a date (2026-11-30) or an RFC 3339 time (2026-11-30T12:00:00Z)"}
}

// usageReport is the tenant's usage over a period, as the page and the
// summary show it.
type usageReport struct {
	Range                      usage.Range
	Totals                     usage.Totals
	Sandboxes                  int // that used anything
	Daily                      []usage.Day
	BySandbox, ByUser, ByTempl []usage.Line
	userNames                  map[string]string
	meters                     map[string]usage.Meter
}

func (h *Handlers) usageReport(ctx context.Context, st *usage.Store, tenantID string, r usage.Range) (usageReport, error) {
	rep := usageReport{Range: r}
	var err error
	if rep.Totals, err = st.Totals(ctx, tenantID, r); err != nil {
		return rep, err
	}
	if rep.Daily, err = st.Daily(ctx, tenantID, r); err != nil {
		return rep, err
	}
	all, err := st.Top(ctx, tenantID, r, usage.BySandbox, 0)
	if err != nil {
		return rep, err
	}
	rep.Sandboxes = len(all)
	rep.BySandbox = all[:min(len(all), usageTopN)]
	if rep.ByUser, err = st.Top(ctx, tenantID, r, usage.ByUser, usageTopN); err != nil {
		return rep, err
	}
	if rep.ByTempl, err = st.Top(ctx, tenantID, r, usage.ByTemplate, usageTopN); err != nil {
		return rep, err
	}
	if rep.userNames, err = st.UserNames(ctx, tenantID); err != nil {
		return rep, err
	}
	ids := make([]string, 0, len(rep.BySandbox))
	for _, l := range rep.BySandbox {
		ids = append(ids, l.Key)
	}
	if rep.meters, err = st.Meters(ctx, tenantID, ids); err != nil {
		return rep, err
	}
	return rep, nil
}

// label names a line of a top list for people.
func (r usageReport) label(by, key string) string {
	switch {
	case key == "":
		return "(none)"
	case by == usage.ByUser:
		if n := r.userNames[key]; n != "" {
			return n
		}
	case by == usage.BySandbox:
		if m, ok := r.meters[key]; ok && m.Template != "" {
			return shortID(key) + " · " + m.Template
		}
		return shortID(key)
	}
	return key
}

// amountView is an exact cost for a page: rounded from the exact figure,
// so the page shows what the export's rows add up to.
func amountView(m usage.Money) views.Amount {
	return views.Amount{Value: m.Float64(), Cents: m.Round(2), Fine: m.Round(4)}
}

func usageTotalsView(t usage.Totals) views.UsageTotals {
	return views.UsageTotals{Cost: amountView(t.Cost), Currency: t.Currency, VCPUHours: t.VCPUSeconds() / 3600, GiBHours: t.GiBSeconds() / 3600,
		CPUHours: t.CPUSeconds() / 3600, WallHours: t.WallSeconds() / 3600, EgressBytes: t.EgressBytes(), MemoryPeakBytes: t.MemoryPeakBytes}
}

// quotaLines sets the tenant's quota against what it holds now (active
// sandboxes and VMs) and the CPU time it used this month.
func (h *Handlers) quotaLines(ctx context.Context, tenantID string) ([]usage.QuotaLine, error) {
	q, err := h.store.Quota(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	var held tenants.Usage
	if h.sbx != nil {
		sbs, err := h.sbx.List(ctx, tenantID)
		if err != nil {
			return nil, err
		}
		for _, sb := range sbs {
			if sb.State.Active() {
				held.Sandboxes++
				held.VCPUs += sb.VCPUs
				held.MemoryMiB += sb.MemoryMiB
			}
		}
	}
	if h.vms != nil {
		vms, err := h.vms.List(ctx, tenantID)
		if err != nil {
			return nil, err
		}
		for _, vm := range vms {
			if vm.State.Active() {
				held.VMs++
			}
		}
	}
	cpu := 0.0
	if h.usage != nil {
		if cpu, err = h.usage.CPUSecondsThisMonth(ctx, tenantID); err != nil {
			return nil, err
		}
	}
	return usage.QuotaLines(q, held, cpu), nil
}

func quotaLinesView(lines []usage.QuotaLine) []views.QuotaLineView {
	out := make([]views.QuotaLineView, 0, len(lines))
	for _, l := range lines {
		out = append(out, views.QuotaLineView{Name: l.Name, Label: l.Label, Used: l.Used, Limit: l.Limit, Share: l.Share, Warn: l.Warn, Over: l.Over})
	}
	return out
}

// quotaWarningsView is the caller's tenant quota lines for the warnings on
// the dashboard and the sandboxes page; nil (no warning) when they cannot
// be read, which the log says: a warning must never break those pages.
func (h *Handlers) quotaWarningsView(c echo.Context) []views.QuotaLineView {
	ctx := c.Request().Context()
	lines, err := h.quotaLines(ctx, CallerOf(c).Tenant.ID)
	if err != nil {
		h.log.WarnContext(ctx, "quota lines for the warning", "err", err)
		return nil
	}
	return quotaLinesView(lines)
}

// usagePeriodURL is the usage page of [from, to), to shown inclusive.
func usagePeriodURL(from, to time.Time) string {
	q := url.Values{"from": {from.Format(time.DateOnly)}, "to": {lastDay(to).Format(time.DateOnly)}}
	return "/usage?" + q.Encode()
}

// lastDay is the day a period ending at to (exclusive) ends in.
func lastDay(to time.Time) time.Time { return to.Add(-time.Nanosecond).UTC() }

func periodLabel(r usage.Range) string {
	from, to := r.From.UTC(), r.To.UTC()
	if from.Equal(usage.MonthStart(from)) && to.Equal(from.AddDate(0, 1, 0)) {
		return from.Format("January 2006")
	}
	midnight := func(t time.Time) bool { return t.Equal(t.Truncate(24 * time.Hour)) }
	if midnight(from) && midnight(to) {
		return from.Format(time.DateOnly) + " to " + lastDay(to).Format(time.DateOnly)
	}
	return from.Format(time.RFC3339) + " to " + to.Format(time.RFC3339)
}

// UsagePage is the tenant's usage for a period: GET /usage?from=&to=.
func (h *Handlers) UsagePage(c echo.Context) error {
	st, err := h.meteredUsage()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	now := h.clock().UTC()
	status := http.StatusOK
	r, err := usagePeriodOf(c, now, usageMaxSpan)
	var periodErrs map[string]string
	if err != nil {
		// A period that cannot be read is said next to its field, the
		// typed dates kept, over this month's figures (as /operator/usage).
		if periodErrs = inputErrors(err); periodErrs == nil {
			return err
		}
		status = errdefs.HTTPStatus(err)
		r = usage.Range{From: usage.MonthStart(now), To: usage.MonthStart(now).AddDate(0, 1, 0)}
	}
	rep, err := h.usageReport(ctx, st, cl.Tenant.ID, r)
	if err != nil {
		return err
	}
	lines, err := h.quotaLines(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	month := usage.MonthStart(r.From)
	this := usage.MonthStart(now)
	v := views.UsageView{
		PeriodLabel: periodLabel(r), From: r.From.UTC().Format(time.DateOnly), To: lastDay(r.To).Format(time.DateOnly),
		PrevURL: usagePeriodURL(month.AddDate(0, -1, 0), month), NextURL: usagePeriodURL(month.AddDate(0, 1, 0), month.AddDate(0, 2, 0)),
		ThisMonthURL: usagePeriodURL(this, this.AddDate(0, 1, 0)),
		Totals:       usageTotalsView(rep.Totals), Sandboxes: rep.Sandboxes, Quota: quotaLinesView(lines),
		CanExport: tenants.Can(cl.Role, tenants.PermUsageExport),
	}
	for _, d := range rep.Daily {
		v.Days = append(v.Days, views.UsageDay{Day: d.Day, UsageTotals: usageTotalsView(d.Totals)})
	}
	line := func(by string, l usage.Line) views.UsageLine {
		out := views.UsageLine{Key: l.Key, Label: rep.label(by, l.Key), UsageTotals: usageTotalsView(l.Totals)}
		if by == usage.BySandbox {
			out.Href = "/usage/sandboxes/" + url.PathEscape(l.Key)
		}
		return out
	}
	for _, l := range rep.BySandbox {
		v.TopSandboxes = append(v.TopSandboxes, line(usage.BySandbox, l))
	}
	for _, l := range rep.ByUser {
		v.TopUsers = append(v.TopUsers, line(usage.ByUser, l))
	}
	for _, l := range rep.ByTempl {
		v.TopTemplates = append(v.TopTemplates, line(usage.ByTemplate, l))
	}
	vc, err := st.VolumeCharges(ctx, cl.Tenant.ID, r)
	if err != nil {
		return err
	}
	for _, l := range usage.SumVolumes(vc) {
		v.Volumes = append(v.Volumes, views.UsageVolume{Name: l.VolumeName, SizeGiB: l.SizeGiB, GiBMonths: l.GiBMonths,
			Cost: amountView(l.Cost), Currency: l.Currency})
	}
	if periodErrs != nil {
		v.Errors, v.From, v.To = periodErrs, c.QueryParam("from"), c.QueryParam("to")
	}
	return render(c, status, views.Usage(h.page(c, "Usage", views.NavUsage), v))
}

// SandboxUsagePage is one sandbox's usage: its ledger hours with their
// cost, and charts of its samples: GET /usage/sandboxes/:id. Another
// tenant's sandbox is not found.
func (h *Handlers) SandboxUsagePage(c echo.Context) error {
	st, err := h.meteredUsage()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	id := c.Param("id")
	v := views.SandboxUsageView{ID: id}
	if l := "/sandboxes/" + id; mayOpen(c, l) {
		v.SandboxHref = l
	}
	m, err := st.Meter(ctx, cl.Tenant.ID, id)
	switch {
	case err == nil:
		v.Metered = true
		v.Template, v.User, v.VCPUs, v.MemoryMiB = m.Template, m.UserName, m.VCPUs, m.MemoryMiB
		started := m.StartedAt
		v.StartedAt, v.Closed = &started, m.ClosedAt
	case !errors.Is(err, usage.ErrNoMeter):
		return err
	}
	// The sandbox itself, for its state (and, unmetered, to tell a sandbox
	// that never ran from one that is not the tenant's).
	switch {
	case h.sbx != nil:
		sb, err := h.sbx.Store().Sandbox(ctx, cl.Tenant.ID, id)
		switch {
		case err == nil:
			v.State = string(sb.State)
			if !v.Metered {
				v.Template, v.User, v.VCPUs, v.MemoryMiB = sb.Template, sb.CreatedByName, sb.VCPUs, sb.MemoryMiB
			}
		case errors.Is(err, errdefs.ErrNotFound) && v.Metered:
			v.State = "destroyed" // its record is gone; its usage stays
		default:
			return err
		}
	case !v.Metered:
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	entries, err := st.Entries(ctx, cl.Tenant.ID, id)
	if err != nil {
		return err
	}
	ps, err := st.LoadPrices(ctx)
	if err != nil {
		return err
	}
	var total usage.Totals
	total.Currency = ps.At(cl.Tenant.ID, h.clock()).Currency
	for _, e := range entries {
		p := ps.At(cl.Tenant.ID, e.PeriodStart)
		s := usage.Sums{AllocVCPUMS: e.AllocVCPUMS, AllocMiBMS: e.AllocMiBMS, WallMS: e.WallMS, CPUNS: e.CPUNS,
			EgressUpBytes: e.EgressUpBytes, EgressDownBytes: e.EgressDownBytes, IOReadBytes: e.IOReadBytes,
			IOWriteBytes: e.IOWriteBytes, MemoryPeakBytes: e.MemoryPeakBytes}
		var t usage.Totals
		t.Add(s, p)
		v.Hours = append(v.Hours, views.UsageHour{Start: e.PeriodStart, UsageTotals: usageTotalsView(t)})
		total.Add(s, p)
	}
	v.Totals = usageTotalsView(total)
	samples, err := st.Samples(ctx, cl.Tenant.ID, id, usageSampleLimit)
	if err != nil {
		return err
	}
	v.CPU, v.Memory = samplePoints(samples)
	return render(c, http.StatusOK, views.SandboxUsage(h.page(c, "Usage of sandbox "+shortID(id), views.NavUsage), v))
}

// samplePoints turns cumulative samples into chart points: vCPUs busy
// between consecutive samples, and memory in use at each.
func samplePoints(samples []usage.SampleRow) (cpu, mem []views.UsagePoint) {
	for i, s := range samples {
		mem = append(mem, views.UsagePoint{At: s.At, Value: float64(s.MemoryCurrentBytes) / (1 << 20)})
		if i == 0 {
			continue
		}
		prev := samples[i-1]
		if dt := s.At.Sub(prev.At); dt > 0 {
			cpu = append(cpu, views.UsagePoint{At: s.At, Value: max(0, float64(s.CPUNS-prev.CPUNS)/float64(dt.Nanoseconds()))})
		}
	}
	return cpu, mem
}

func usageTotalsJSON(t usage.Totals) api.UsageTotals {
	return api.UsageTotals{Cost: json.Number(t.Cost.String()), Currency: t.Currency, VCPUSeconds: t.VCPUSeconds(), GiBSeconds: t.GiBSeconds(),
		CPUSeconds: t.CPUSeconds(), WallSeconds: t.WallSeconds(), EgressBytes: t.EgressBytes(), EgressUpBytes: t.EgressUpBytes,
		EgressDownBytes: t.EgressDownBytes, MemoryPeakBytes: t.MemoryPeakBytes}
}

// APIUsageSummary is the tenant's usage over a period (default this month):
// totals, each day, and the top 10 sandboxes, users and templates by cost:
// GET /api/v1/usage/summary?from=&to=.
func (h *Handlers) APIUsageSummary(c echo.Context) error {
	st, err := h.meteredUsage()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	r, err := usagePeriodOf(c, h.clock().UTC(), usageMaxSpan)
	if err != nil {
		return err
	}
	rep, err := h.usageReport(ctx, st, cl.Tenant.ID, r)
	if err != nil {
		return err
	}
	out := api.UsageSummary{Tenant: cl.Tenant.Slug, From: r.From.UTC().Format(timeJSON), To: r.To.UTC().Format(timeJSON),
		Totals: usageTotalsJSON(rep.Totals), Sandboxes: rep.Sandboxes, Daily: []api.UsageDay{}}
	for _, d := range rep.Daily {
		out.Daily = append(out.Daily, api.UsageDay{Day: d.Day.UTC().Format(time.DateOnly), UsageTotals: usageTotalsJSON(d.Totals)})
	}
	lines := func(by string, ls []usage.Line) []api.UsageLine {
		o := []api.UsageLine{}
		for _, l := range ls {
			o = append(o, api.UsageLine{Key: l.Key, Label: rep.label(by, l.Key), UsageTotals: usageTotalsJSON(l.Totals)})
		}
		return o
	}
	out.Top.Sandboxes = lines(usage.BySandbox, rep.BySandbox)
	out.Top.Users = lines(usage.ByUser, rep.ByUser)
	out.Top.Templates = lines(usage.ByTemplate, rep.ByTempl)
	return c.JSON(http.StatusOK, out)
}

// APIQuota is the caller's tenant quota, each line with what is held or
// used of it: GET /api/v1/quota.
func (h *Handlers) APIQuota(c echo.Context) error {
	cl := CallerOf(c)
	lines, err := h.quotaLines(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return err
	}
	out := api.QuotaReport{Tenant: cl.Tenant.Slug, WarnAt: usage.WarnAt, Quotas: make([]api.QuotaLine, 0, len(lines))}
	for _, l := range lines {
		out.Quotas = append(out.Quotas, api.QuotaLine(l))
	}
	return c.JSON(http.StatusOK, out)
}

// APIUsageExport streams the tenant's ledger over a period (default this
// month) as FOCUS rows in CSV (default) or JSON, and audits it
// usage.exported with the period, the format and the rows written:
// GET /api/v1/usage?from=&to=&format=csv|json.
func (h *Handlers) APIUsageExport(c echo.Context) error {
	st, err := h.meteredUsage()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	r, err := usagePeriodOf(c, h.clock().UTC(), 0)
	if err != nil {
		return err
	}
	format := c.QueryParam("format")
	if format == "" {
		format = usage.FormatCSV
	}
	var ctype string
	switch format {
	case usage.FormatCSV:
		ctype = "text/csv; charset=utf-8"
	case usage.FormatJSON:
		ctype = echo.MIMEApplicationJSON
	default:
		return &errdefs.MalformedError{Field: "format", Detail: `must be "csv" or "json"`}
	}
	name := fmt.Sprintf("usage-%s-%s-%s.%s", cl.Tenant.Slug, r.From.UTC().Format("20060102T150405Z"), r.To.UTC().Format("20060102T150405Z"), format)
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, ctype)
	w.Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`"`)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// The status goes out with the first bytes: an export that fails before
	// writing any (the database down) is still a clean problem document.
	res, exportErr := st.Export(ctx, w, usage.ExportQuery{TenantID: cl.Tenant.ID, Range: r, Format: format})
	// Audited once the rows are counted, even when the client went away.
	a := cl.Actor(c)
	e := a.Event(cl.Tenant.ID, audit.TypeUsageExported, "usage", cl.Tenant.ID, map[string]any{
		"from": r.From.UTC().Format(time.RFC3339), "to": r.To.UTC().Format(time.RFC3339), "format": format,
		"rows": res.Rows, "ledger_rows": res.LedgerRows, "scope": "tenant",
	})
	if exportErr != nil {
		e.Outcome = audit.OutcomeFailure
		e.Details["error"] = exportErr.Error()
	}
	if err := h.audit.Record(context.WithoutCancel(ctx), e); err != nil {
		h.log.ErrorContext(ctx, "audit usage export", "err", err)
	}
	if exportErr != nil && !w.Committed {
		w.Header().Del(echo.HeaderContentDisposition)
		w.Header().Del(echo.HeaderContentType)
		return exportErr
	}
	if exportErr != nil {
		// The status is already sent; the truncated body, the audit log and
		// this log say it failed.
		h.log.ErrorContext(ctx, "usage export failed", "err", exportErr, "rows", res.Rows)
	}
	return nil
}
