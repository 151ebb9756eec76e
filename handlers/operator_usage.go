package handlers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
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

// The platform operators' side of metering: usage across tenants and its
// export, the price book, and tenant quotas.

// operatorUsage is the usage store.
// Kept so its call sites stay as they are; every service is required
// (handlers.New), so it never fails.
func (h *Handlers) operatorUsage() (*usage.Store, error) { return h.usage, nil }

const opDateOnly = "2006-01-02"

// operatorPeriod reads from and to (RFC 3339, or a date: to then includes
// that whole day, UTC). The default is the current calendar month; with
// only from, the month from starts in. A bad value is a 400 naming it.
func operatorPeriod(now time.Time, from, to string) (usage.Range, error) {
	parse := func(field, s string, end bool) (time.Time, error) {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return t.UTC(), nil
		}
		t, err := time.Parse(opDateOnly, s)
		if err != nil {
			return time.Time{}, &errdefs.MalformedError{Field: field, Detail: "must be a date (YYYY-MM-DD) or an RFC 3339 time"}
		}
		if end {
			t = t.AddDate(0, 0, 1)
		}
		return t, nil
	}
	r := usage.Range{From: usage.MonthStart(now)}
	if from = strings.TrimSpace(from); from != "" {
		t, err := parse("from", from, false)
		if err != nil {
			return usage.Range{}, err
		}
		r.From = t
	}
	r.To = usage.MonthStart(r.From).AddDate(0, 1, 0)
	if to = strings.TrimSpace(to); to != "" {
		t, err := parse("to", to, true)
		if err != nil {
			return usage.Range{}, err
		}
		r.To = t
	}
	if !r.To.After(r.From) {
		return usage.Range{}, &errdefs.MalformedError{Field: "to", Detail: "the period must end after it starts"}
	}
	return r, nil
}

// opPeriodLabel says a period in words: a calendar month by its name.
func opPeriodLabel(r usage.Range) string {
	if r.From.Equal(usage.MonthStart(r.From)) && r.To.Equal(r.From.AddDate(0, 1, 0)) {
		return r.From.Format("January 2006")
	}
	return r.From.Format(opDateOnly) + " to " + r.To.Add(-time.Nanosecond).Format(opDateOnly)
}

// opPeriodQuery is the query of a period as dates (to inclusive) when it is
// whole days, else as RFC 3339 times.
func opPeriodQuery(r usage.Range) url.Values {
	q := url.Values{}
	if r.From.Equal(r.From.Truncate(24*time.Hour)) && r.To.Equal(r.To.Truncate(24*time.Hour)) {
		q.Set("from", r.From.Format(opDateOnly))
		q.Set("to", r.To.AddDate(0, 0, -1).Format(opDateOnly))
		return q
	}
	q.Set("from", r.From.Format(time.RFC3339))
	q.Set("to", r.To.Format(time.RFC3339))
	return q
}

// OperatorUsagePage shows every tenant's usage and cost for a period.
func (h *Handlers) OperatorUsagePage(c echo.Context) error {
	us, err := h.operatorUsage()
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	now := h.clock().UTC()
	status := http.StatusOK
	v := views.OperatorUsageView{}
	r, err := operatorPeriod(now, c.QueryParam("from"), c.QueryParam("to"))
	if err != nil {
		var me *errdefs.MalformedError
		if !errors.As(err, &me) {
			return err
		}
		status, v.Errors = errdefs.HTTPStatus(err), map[string]string{me.Field: me.Detail}
		r, _ = operatorPeriod(now, "", "")
	}
	q := opPeriodQuery(r)
	if v.Errors == nil {
		v.From, v.To = q.Get("from"), q.Get("to")
	} else {
		v.From, v.To = c.QueryParam("from"), c.QueryParam("to")
	}
	v.PeriodLabel = opPeriodLabel(r)
	prev := usage.MonthStart(r.From).AddDate(0, -1, 0)
	v.PrevHref = "/operator/usage?" + opPeriodQuery(usage.Range{From: prev, To: prev.AddDate(0, 1, 0)}).Encode()
	next := usage.MonthStart(r.From).AddDate(0, 1, 0)
	v.NextHref = "/operator/usage?" + opPeriodQuery(usage.Range{From: next, To: next.AddDate(0, 1, 0)}).Encode()
	v.ExportCSV = "/api/v1/operator/usage?" + q.Encode() + "&format=csv"
	v.ExportJSON = "/api/v1/operator/usage?" + q.Encode() + "&format=json"

	all, err := us.AllTenants(ctx, r)
	if err != nil {
		return err
	}
	ts, err := h.store.ListTenants(ctx)
	if err != nil {
		return err
	}
	byID := map[string]tenants.TenantSummary{}
	for _, t := range ts {
		byID[t.ID] = t
	}
	totals := map[string]*views.OperatorUsageRow{}
	costs := map[string]usage.Money{} // exact, per currency
	for _, t := range all {
		tn := byID[t.TenantID]
		row := views.OperatorUsageRow{Slug: tn.Slug, Name: tn.Name, Cost: amountView(t.Cost), Currency: t.Currency,
			VCPUHours: t.VCPUSeconds() / 3600, GiBHours: t.GiBSeconds() / 3600, CPUHours: t.CPUSeconds() / 3600,
			EgressBytes: t.EgressBytes(), WallHours: t.WallSeconds() / 3600,
			PricesHref: "/operator/prices?tenant=" + url.QueryEscape(tn.Slug), QuotaHref: "/operator/tenants#quota-" + tn.Slug}
		if row.Slug == "" {
			row.Slug = t.TenantID
		}
		v.Rows = append(v.Rows, row)
		sum := totals[t.Currency]
		if sum == nil {
			sum = &views.OperatorUsageRow{Currency: t.Currency}
			totals[t.Currency] = sum
		}
		costs[t.Currency] = costs[t.Currency].Add(t.Cost)
		sum.Cost = amountView(costs[t.Currency])
		sum.VCPUHours += row.VCPUHours
		sum.GiBHours += row.GiBHours
		sum.CPUHours += row.CPUHours
		sum.EgressBytes += row.EgressBytes
		sum.WallHours += row.WallHours
	}
	for _, t := range totals {
		v.Totals = append(v.Totals, *t)
	}
	sort.Slice(v.Totals, func(i, j int) bool { return v.Totals[i].Currency < v.Totals[j].Currency })
	return render(c, status, views.OperatorUsage(h.page(c, "Usage across tenants", views.NavOperatorUsage), v))
}

// OperatorUsageExport streams every tenant's usage over a period as FOCUS
// rows (GET /api/v1/operator/usage?from=&to=&format=csv|json), audited
// usage.exported with scope "all" once it has been written.
func (h *Handlers) OperatorUsageExport(c echo.Context) error {
	us, err := h.operatorUsage()
	if err != nil {
		return err
	}
	r, err := operatorPeriod(h.clock().UTC(), c.QueryParam("from"), c.QueryParam("to"))
	if err != nil {
		return err
	}
	format := c.QueryParam("format")
	if format == "" {
		format = usage.FormatCSV
	}
	if format != usage.FormatCSV && format != usage.FormatJSON {
		return &errdefs.MalformedError{Field: "format", Detail: `must be "csv" or "json"`}
	}
	w := c.Response()
	name := "usage-all-" + r.From.Format("20060102") + "-" + r.To.Format("20060102") + "." + format
	if format == usage.FormatCSV {
		w.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	} else {
		w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSONCharsetUTF8)
	}
	w.Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`"`)
	w.Header().Set("Cache-Control", "no-store")
	ctx := c.Request().Context()
	res, err := us.Export(ctx, w, usage.ExportQuery{Range: r, Format: format})
	details := map[string]any{"scope": "all", "from": r.From.Format(time.RFC3339), "to": r.To.Format(time.RFC3339),
		"format": format, "rows": res.Rows, "ledger_rows": res.LedgerRows}
	e := CallerOf(c).Actor(c).Event("", audit.TypeUsageExported, "usage", "all", details)
	if err != nil {
		e.Outcome = audit.OutcomeFailure
		details["error"] = err.Error()
	}
	// Recorded even when the client went away mid-stream: what left the
	// server is what counts.
	if aerr := h.audit.Record(context.WithoutCancel(ctx), e); aerr != nil {
		h.log.ErrorContext(ctx, "audit usage export", "err", aerr)
		if err == nil && !w.Committed {
			return aerr
		}
	}
	if err != nil && !w.Committed {
		w.Header().Del(echo.HeaderContentDisposition)
		return err
	}
	if err != nil {
		h.log.WarnContext(ctx, "usage export ended early", "err", err, "rows", res.Rows)
	}
	return nil
}

func priceVersionJSON(p usage.Price) api.PriceVersion {
	out := api.PriceVersion{ID: p.ID, TenantID: p.TenantID, Currency: p.Currency, VCPUSecond: p.VCPUSecond, GiBSecond: p.GiBSecond,
		CPUSecond: p.CPUSecond, EgressGB: p.EgressGB, VolumeGiBMonth: p.VolumeGiBMonth, EffectiveFrom: p.EffectiveFrom.UTC().Format(timeJSON), CreatedBy: p.CreatedBy}
	if !p.CreatedAt.IsZero() {
		out.CreatedAt = p.CreatedAt.UTC().Format(timeJSON)
	}
	return out
}

// APIPrices returns the platform list price in force, its history, and
// every tenant's price in force (GET /api/v1/prices).
func (h *Handlers) APIPrices(c echo.Context) error {
	us, err := h.operatorUsage()
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	now := h.clock().UTC()
	ps, err := us.LoadPrices(ctx)
	if err != nil {
		return err
	}
	hist, err := us.PriceHistory(ctx, "")
	if err != nil {
		return err
	}
	ts, err := h.store.ListTenants(ctx)
	if err != nil {
		return err
	}
	out := api.PriceBook{Platform: priceVersionJSON(ps.At("", now)), PlatformHistory: []api.PriceVersion{}, Tenants: []api.TenantPrice{}}
	for _, p := range hist {
		out.PlatformHistory = append(out.PlatformHistory, priceVersionJSON(p))
	}
	for _, t := range ts {
		p := ps.At(t.ID, now)
		out.Tenants = append(out.Tenants, api.TenantPrice{TenantID: t.ID, Slug: t.Slug, Override: p.TenantID == t.ID, Price: priceVersionJSON(p)})
	}
	return c.JSON(http.StatusOK, out)
}

// APISetPrice adds a version to the platform's price book or, with
// tenant_id, to a tenant's (POST /api/v1/prices).
func (h *Handlers) APISetPrice(c echo.Context) error {
	us, err := h.operatorUsage()
	if err != nil {
		return err
	}
	var in api.SetPrice
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	// A version is a whole price list: a forgotten field must not silently
	// become free.
	for _, f := range []struct {
		name string
		set  bool
	}{{"currency", in.Currency != nil}, {"vcpu_second", in.VCPUSecond != nil}, {"gib_second", in.GiBSecond != nil},
		{"cpu_second", in.CPUSecond != nil}, {"egress_gb", in.EgressGB != nil}} {
		if !f.set {
			return errdefs.Invalid(f.name, "required", "is required")
		}
	}
	p := usage.Price{TenantID: strings.TrimSpace(in.TenantID), Currency: strings.TrimSpace(*in.Currency), VCPUSecond: *in.VCPUSecond,
		GiBSecond: *in.GiBSecond, CPUSecond: *in.CPUSecond, EgressGB: *in.EgressGB}
	if p.VolumeGiBMonth, err = keptVolumePrice(c.Request().Context(), us, p.TenantID, h.clock(), in.VolumeGiBMonth); err != nil {
		return err
	}
	if s := strings.TrimSpace(in.EffectiveFrom); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return errdefs.Invalid("effective_from", "rfc3339", "must be an RFC 3339 time such as 2026-12-01T00:00:00Z")
		}
		p.EffectiveFrom = t
	}
	saved, err := us.SetPrice(c.Request().Context(), CallerOf(c).Actor(c), p)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, priceVersionJSON(saved))
}

// PricesPage is the price book editor (GET /operator/prices?tenant=slug).
func (h *Handlers) PricesPage(c echo.Context) error {
	v, err := h.pricesView(c, c.QueryParam("tenant"), views.PriceForm{}, views.PriceForm{})
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Prices(h.page(c, "Prices", views.NavPrices), v))
}

// OperatorSetPrice adds a price version from the editor's form: the
// platform's, or with tenant (a slug) that tenant's.
func (h *Handlers) OperatorSetPrice(c echo.Context) error {
	us, err := h.operatorUsage()
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	slug := strings.TrimSpace(c.FormValue("tenant"))
	form := views.PriceForm{Currency: strings.ToUpper(strings.TrimSpace(c.FormValue("currency"))), VCPUSecond: strings.TrimSpace(c.FormValue("vcpu_second")),
		GiBSecond: strings.TrimSpace(c.FormValue("gib_second")), CPUSecond: strings.TrimSpace(c.FormValue("cpu_second")),
		EgressGB:       strings.TrimSpace(c.FormValue("egress_gb")),
		VolumeGiBMonth: strings.TrimSpace(c.FormValue("volume_gib_month")), EffectiveFrom: strings.TrimSpace(c.FormValue("effective_from"))}
	p := usage.Price{Currency: form.Currency}
	var tn tenants.Tenant
	if slug != "" {
		if tn, err = h.store.TenantBySlug(ctx, slug); err != nil {
			return err
		}
		p.TenantID = tn.ID
	}
	err = opParsePriceForm(form, &p)
	if err == nil && form.VolumeGiBMonth == "" {
		p.VolumeGiBMonth, err = keptVolumePrice(ctx, us, p.TenantID, h.clock(), nil)
	}
	if err == nil {
		p, err = us.SetPrice(ctx, CallerOf(c).Actor(c), p)
	}
	if err != nil {
		status := errdefs.HTTPStatus(err)
		if form.Errors, err = fieldErrors(err); err != nil {
			return err
		}
		pf, tf := form, views.PriceForm{}
		if slug != "" {
			pf, tf = views.PriceForm{}, form
		}
		v, err := h.pricesView(c, slug, pf, tf)
		if err != nil {
			return err
		}
		return render(c, status, views.Prices(h.page(c, "Prices", views.NavPrices), v))
	}
	what := "The platform list price"
	to := "/operator/prices"
	if slug != "" {
		what, to = "The price of "+tn.Slug, "/operator/prices?tenant="+url.QueryEscape(tn.Slug)
	}
	h.flash(c, "success", fmt.Sprintf("%s is %s %s per vCPU-second from %s.", what, p.Currency, strconv.FormatFloat(p.VCPUSecond, 'f', -1, 64),
		p.EffectiveFrom.UTC().Format("2006-01-02 15:04 UTC")))
	return redirect(c, to)
}

// opParsePriceForm reads the form's numbers and start into p, naming the
// field at fault.
func opParsePriceForm(f views.PriceForm, p *usage.Price) error {
	for _, x := range []struct {
		name, value string
		dst         *float64
	}{{"vcpu_second", f.VCPUSecond, &p.VCPUSecond}, {"gib_second", f.GiBSecond, &p.GiBSecond},
		{"cpu_second", f.CPUSecond, &p.CPUSecond}, {"egress_gb", f.EgressGB, &p.EgressGB}} {
		if x.value == "" {
			return errdefs.Invalid(x.name, "required", "is required (0 for free)")
		}
		v, err := strconv.ParseFloat(x.value, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return errdefs.Invalid(x.name, "number", "must be a number such as 0.000014")
		}
		*x.dst = v
	}
	if f.VolumeGiBMonth != "" { // added later: empty keeps the price in force
		v, err := strconv.ParseFloat(f.VolumeGiBMonth, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return errdefs.Invalid("volume_gib_month", "number", "must be a number such as 0.08")
		}
		p.VolumeGiBMonth = v
	}
	if f.EffectiveFrom != "" {
		var t time.Time
		var err error
		for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339, opDateOnly} {
			if t, err = time.Parse(layout, f.EffectiveFrom); err == nil {
				break
			}
		}
		if err != nil {
			return errdefs.Invalid("effective_from", "datetime", "must be a date and time (UTC), or empty for now")
		}
		p.EffectiveFrom = t.UTC()
	}
	return nil
}

func opPriceRow(p usage.Price, now time.Time, current string) views.PriceRow {
	return views.PriceRow{ID: p.ID, Currency: p.Currency, VCPUSecond: p.VCPUSecond, GiBSecond: p.GiBSecond, CPUSecond: p.CPUSecond,
		EgressGB: p.EgressGB, VolumeGiBMonth: p.VolumeGiBMonth, EffectiveFrom: p.EffectiveFrom, CreatedBy: p.CreatedBy, CreatedAt: p.CreatedAt,
		Current: p.ID != "" && p.ID == current, Future: p.EffectiveFrom.After(now)}
}

// opPriceFormOf fills an empty form with p's figures, so a new version starts from
// the one in force.
func opPriceFormOf(f views.PriceForm, p usage.Price) views.PriceForm {
	if f.Errors != nil || f.Currency != "" {
		return f
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	return views.PriceForm{Currency: p.Currency, VCPUSecond: num(p.VCPUSecond), GiBSecond: num(p.GiBSecond), CPUSecond: num(p.CPUSecond),
		EgressGB: num(p.EgressGB), VolumeGiBMonth: num(p.VolumeGiBMonth)}
}

func (h *Handlers) pricesView(c echo.Context, slug string, platformForm, tenantForm views.PriceForm) (views.PricesView, error) {
	us, err := h.operatorUsage()
	if err != nil {
		return views.PricesView{}, err
	}
	ctx := c.Request().Context()
	now := h.clock().UTC()
	ps, err := us.LoadPrices(ctx)
	if err != nil {
		return views.PricesView{}, err
	}
	hist, err := us.PriceHistory(ctx, "")
	if err != nil {
		return views.PricesView{}, err
	}
	cur := ps.At("", now)
	v := views.PricesView{Platform: opPriceRow(cur, now, cur.ID), DefaultInForce: cur.ID == usage.DefaultPrice().ID,
		PlatformForm: opPriceFormOf(platformForm, cur)}
	for _, p := range hist {
		v.PlatformHistory = append(v.PlatformHistory, opPriceRow(p, now, cur.ID))
	}
	ts, err := h.store.ListTenants(ctx)
	if err != nil {
		return views.PricesView{}, err
	}
	for _, t := range ts {
		label := t.Slug
		if t.Name != "" && t.Name != t.Slug {
			label += " (" + t.Name + ")"
		}
		v.Tenants = append(v.Tenants, views.Choice{Value: t.Slug, Label: label})
		if p := ps.At(t.ID, now); p.TenantID == t.ID {
			v.Overrides = append(v.Overrides, views.PriceOverrideRow{Slug: t.Slug, Price: opPriceRow(p, now, p.ID)})
		}
	}
	if slug == "" {
		return h.namePriceSetters(ctx, v)
	}
	tn, err := h.store.TenantBySlug(ctx, slug)
	if err != nil {
		return views.PricesView{}, err
	}
	tcur := ps.At(tn.ID, now)
	v.Tenant, v.TenantName = tn.Slug, tn.Name
	v.TenantCurrent, v.TenantOverride = opPriceRow(tcur, now, tcur.ID), tcur.TenantID == tn.ID
	v.TenantForm = opPriceFormOf(tenantForm, tcur)
	th, err := us.PriceHistory(ctx, tn.ID)
	if err != nil {
		return views.PricesView{}, err
	}
	for _, p := range th {
		v.TenantHistory = append(v.TenantHistory, opPriceRow(p, now, tcur.ID))
	}
	return h.namePriceSetters(ctx, v)
}

// namePriceSetters shows who set each price by email, not user id.
func (h *Handlers) namePriceSetters(ctx context.Context, v views.PricesView) (views.PricesView, error) {
	who, err := h.people(ctx, "")
	if err != nil {
		return v, err
	}
	for _, rows := range [][]views.PriceRow{v.PlatformHistory, v.TenantHistory} {
		for i := range rows {
			rows[i].CreatedBy = who.name(rows[i].CreatedBy)
		}
	}
	v.Platform.CreatedBy, v.TenantCurrent.CreatedBy = who.name(v.Platform.CreatedBy), who.name(v.TenantCurrent.CreatedBy)
	for i := range v.Overrides {
		v.Overrides[i].Price.CreatedBy = who.name(v.Overrides[i].Price.CreatedBy)
	}
	return v, nil
}

func tenantQuotaJSON(q tenants.Quota) api.TenantQuota {
	out := api.TenantQuota{TenantID: q.TenantID, MaxVMs: q.MaxVMs, MaxVCPUs: q.MaxVCPUs, MaxMemoryMiB: q.MaxMemoryMiB,
		MaxSandboxes: q.MaxSandboxes, MaxCPUHoursMonthly: q.MaxCPUHoursMonthly, MaxTemplateMiB: q.MaxTemplateMiB, MaxVolumeGiB: q.MaxVolumeGiB, UpdatedBy: q.UpdatedBy}
	if !q.UpdatedAt.IsZero() {
		out.UpdatedAt = q.UpdatedAt.UTC().Format(timeJSON)
	}
	return out
}

// APITenantQuota returns a tenant's quota (GET /api/v1/tenants/:id/quota).
func (h *Handlers) APITenantQuota(c echo.Context) error {
	ctx := c.Request().Context()
	tn, err := h.store.TenantByID(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	q, err := h.store.Quota(ctx, tn.ID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tenantQuotaJSON(q))
}

// APISetTenantQuota replaces a tenant's quota (PUT /api/v1/tenants/:id/quota):
// every limit is required.
func (h *Handlers) APISetTenantQuota(c echo.Context) error {
	var in api.SetTenantQuota
	ctx := c.Request().Context()
	tn, err := h.store.TenantByID(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	var q tenants.Quota
	for _, f := range []struct {
		name string
		src  *int
		dst  *int
	}{{tenants.QuotaMaxVMs, in.MaxVMs, &q.MaxVMs}, {tenants.QuotaMaxVCPUs, in.MaxVCPUs, &q.MaxVCPUs},
		{tenants.QuotaMaxMemoryMiB, in.MaxMemoryMiB, &q.MaxMemoryMiB}, {tenants.QuotaMaxSandboxes, in.MaxSandboxes, &q.MaxSandboxes},
		{tenants.QuotaMaxCPUHoursMonthly, in.MaxCPUHoursMonthly, &q.MaxCPUHoursMonthly}} {
		if f.src == nil {
			return errdefs.Invalid(f.name, "required", "is required: PUT replaces the whole quota")
		}
		*f.dst = *f.src
	}
	// max_template_mib came later: a PUT without it keeps the current one.
	if in.MaxTemplateMiB != nil {
		q.MaxTemplateMiB = *in.MaxTemplateMiB
	} else {
		old, err := h.store.Quota(ctx, tn.ID)
		if err != nil {
			return err
		}
		q.MaxTemplateMiB = old.MaxTemplateMiB
	}
	if q.MaxVolumeGiB, err = h.keptVolumeQuota(ctx, tn.ID, in.MaxVolumeGiB); err != nil {
		return err
	}
	saved, err := h.store.SetQuota(ctx, CallerOf(c).Actor(c), tn.ID, q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tenantQuotaJSON(saved))
}

// tenantQuotas is the quota editor of the operators' tenant page.
func (h *Handlers) tenantQuotas(ctx context.Context, ts []tenants.TenantSummary) (views.TenantQuotasView, error) {
	var v views.TenantQuotasView
	for _, t := range ts {
		q, err := h.store.Quota(ctx, t.ID)
		if err != nil {
			return views.TenantQuotasView{}, err
		}
		v.Rows = append(v.Rows, views.TenantQuotaRow{ID: t.ID, Slug: t.Slug, Values: opQuotaValues(q), UpdatedAt: q.UpdatedAt, UpdatedBy: q.UpdatedBy})
	}
	return v, nil
}

func opQuotaValues(q tenants.Quota) map[string]string {
	return map[string]string{
		tenants.QuotaMaxVMs: strconv.Itoa(q.MaxVMs), tenants.QuotaMaxVCPUs: strconv.Itoa(q.MaxVCPUs),
		tenants.QuotaMaxMemoryMiB: strconv.Itoa(q.MaxMemoryMiB), tenants.QuotaMaxSandboxes: strconv.Itoa(q.MaxSandboxes),
		tenants.QuotaMaxCPUHoursMonthly: strconv.Itoa(q.MaxCPUHoursMonthly), tenants.QuotaMaxTemplateMiB: strconv.Itoa(q.MaxTemplateMiB),
		tenants.QuotaMaxVolumeGiB: strconv.Itoa(q.MaxVolumeGiB),
	}
}

// OperatorSetQuota saves a tenant's quota from its form on the tenant page
// (POST /operator/tenants/:id/quota).
func (h *Handlers) OperatorSetQuota(c echo.Context) error {
	ctx := c.Request().Context()
	tn, err := h.store.TenantByID(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	values := map[string]string{}
	var q tenants.Quota
	var old *tenants.Quota // read once, when a field added later is left empty
	for _, f := range []struct {
		name  string
		dst   *int
		later func(tenants.Quota) int // added after the others: empty keeps the current one
	}{{tenants.QuotaMaxSandboxes, &q.MaxSandboxes, nil}, {tenants.QuotaMaxVCPUs, &q.MaxVCPUs, nil},
		{tenants.QuotaMaxMemoryMiB, &q.MaxMemoryMiB, nil}, {tenants.QuotaMaxVMs, &q.MaxVMs, nil},
		{tenants.QuotaMaxCPUHoursMonthly, &q.MaxCPUHoursMonthly, nil},
		{tenants.QuotaMaxTemplateMiB, &q.MaxTemplateMiB, func(o tenants.Quota) int { return o.MaxTemplateMiB }},
		{tenants.QuotaMaxVolumeGiB, &q.MaxVolumeGiB, func(o tenants.Quota) int { return o.MaxVolumeGiB }}} {
		s := strings.TrimSpace(c.FormValue(f.name))
		values[f.name] = s
		if s == "" && f.later != nil {
			if old == nil {
				o, qerr := h.store.Quota(ctx, tn.ID)
				if qerr != nil {
					return qerr
				}
				old = &o
			}
			*f.dst = f.later(*old)
			continue
		}
		n, perr := strconv.Atoi(s)
		if perr != nil && err == nil {
			err = errdefs.Invalid(f.name, "integer", "must be a whole number, 0 or more")
		}
		*f.dst = n
	}
	if err == nil {
		_, err = h.store.SetQuota(ctx, CallerOf(c).Actor(c), tn.ID, q)
	}
	if err != nil {
		status := errdefs.HTTPStatus(err)
		errs, err := fieldErrors(err)
		if err != nil {
			return err
		}
		v, err := h.tenantsView(c, views.TenantForm{})
		if err != nil {
			return err
		}
		for i := range v.Quotas.Rows {
			if v.Quotas.Rows[i].ID == tn.ID {
				v.Quotas.Rows[i].Values, v.Quotas.Rows[i].Errors = values, errs
			}
		}
		return render(c, status, views.Tenants(h.page(c, "Tenants", "tenants"), v))
	}
	h.flash(c, "success", "Quota of "+tn.Slug+" saved.")
	return redirect(c, "/operator/tenants#quota-"+tn.Slug)
}

// keptVolumePrice is the volume storage price a new version of the
// tenant's book (the platform's for "") sets: in when given, else the one
// in force now (older callers do not name it).
func keptVolumePrice(ctx context.Context, us *usage.Store, tenantID string, now time.Time, in *float64) (float64, error) {
	if in != nil {
		return *in, nil
	}
	ps, err := us.LoadPrices(ctx)
	if err != nil {
		return 0, err
	}
	return ps.At(tenantID, now).VolumeGiBMonth, nil
}

// keptVolumeQuota is the volume quota an API quota update sets: in when
// given, else the tenant's current one (older API callers do not name it).
func (h *Handlers) keptVolumeQuota(ctx context.Context, tenantID string, in *int) (int, error) {
	if in != nil {
		return *in, nil
	}
	q, err := h.store.Quota(ctx, tenantID)
	return q.MaxVolumeGiB, err
}
