package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/csvexport"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

func auditRows(evs []audit.Event) []views.AuditRow {
	rows := make([]views.AuditRow, 0, len(evs))
	for _, e := range evs {
		actor := e.ActorName
		if actor == "" {
			actor = e.ActorKind
		}
		target := ""
		if e.TargetKind != "" {
			target = e.TargetKind + " " + e.TargetID
		}
		details := ""
		if len(e.Details) > 0 {
			b, _ := json.Marshal(e.Details)
			details = string(b)
		}
		rows = append(rows, views.AuditRow{ID: e.ID, Time: e.Time, Code: e.Code, Type: e.Type, Actor: actor,
			Target: target, Outcome: e.Outcome, Details: details, RemoteAddr: e.RemoteAddr})
	}
	return rows
}

// parseTime accepts a date (2026-11-30) or an RFC 3339 time.
func parseTime(field, s string, endOfDay bool) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		if endOfDay {
			t = t.Add(24*time.Hour - time.Nanosecond)
		}
		return t, nil
	}
	return time.Time{}, errdefs.Invalid(field, "time_format", "must be a date (2026-11-30) or an RFC 3339 time")
}

func auditFilter(q url.Values) (audit.Filter, error) {
	f := audit.Filter{Type: q.Get("type"), ActorID: q.Get("actor"), Outcome: q.Get("outcome"), Query: q.Get("q"), Before: q.Get("before")}
	// Every field at fault is named, not just the first.
	var errs []error
	var err error
	if f.Since, err = parseTime("since", q.Get("since"), false); err != nil {
		errs = append(errs, err)
	}
	if f.Until, err = parseTime("until", q.Get("until"), true); err != nil {
		errs = append(errs, err)
	} else if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		errs = append(errs, errdefs.Invalid("until", "after_since", "must not be before From"))
	}
	if f.Outcome != "" && !slices.Contains(audit.Outcomes(), f.Outcome) {
		errs = append(errs, errdefs.Invalid("outcome", "enum", `must be "success", "failure" or "denied"`))
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			errs = append(errs, errdefs.Invalid("limit", "range", "must be a whole number from 1 to 1000"))
		}
		f.Limit = n
	}
	return f, errors.Join(errs...)
}

// resolveActor turns the actor filter into an actor id. People type what
// the page shows them: a member's email or a token's prefix; an id passes
// through unchanged.
func (h *Handlers) resolveActor(ctx context.Context, tenantID string, f *audit.Filter) error {
	a := strings.TrimSpace(f.ActorID)
	f.ActorID = a
	switch {
	case strings.Contains(a, "@"):
		ms, err := h.store.ListMembers(ctx, tenantID)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.UserID != nil && strings.EqualFold(m.Email, a) {
				f.ActorID = *m.UserID
			}
		}
	case strings.HasPrefix(a, "stk_"):
		ts, err := h.store.ListTokens(ctx, tenantID)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if t.Prefix == a {
				f.ActorID = t.ID
			}
		}
	}
	return nil
}

// Audit is the audit log page.
func (h *Handlers) Audit(c echo.Context) error {
	cl := CallerOf(c)
	q := c.QueryParams()
	status := http.StatusOK
	f, err := auditFilter(q)
	var filterErrs map[string]string
	if err != nil {
		// A filter that cannot be read is said next to its field, as
		// typed, over the latest events.
		if filterErrs = inputErrors(err); filterErrs == nil {
			return err
		}
		status, f = errdefs.HTTPStatus(err), audit.Filter{}
	}
	if err := h.resolveActor(c.Request().Context(), cl.Tenant.ID, &f); err != nil {
		return err
	}
	if f.Limit == 0 {
		f.Limit = 50
	}
	evs, err := h.audit.List(c.Request().Context(), cl.Tenant.ID, f)
	if err != nil {
		return err
	}
	targets, err := h.auditTargets(c, cl.Tenant.ID)
	if err != nil {
		return err
	}
	v := views.AuditView{
		Rows:     targets.rows(evs),
		Filter:   views.AuditFilter{Type: q.Get("type"), Actor: q.Get("actor"), Outcome: q.Get("outcome"), Since: q.Get("since"), Until: q.Get("until"), Errors: filterErrs},
		Types:    audit.Types(),
		Outcomes: audit.Outcomes(),
	}
	exp := url.Values{}
	for _, k := range []string{"type", "actor", "outcome", "since", "until", "q"} {
		if q.Get(k) != "" {
			exp.Set(k, q.Get(k))
		}
	}
	exp.Set("format", "jsonl")
	v.ExportJSONL = "/audit/export?" + exp.Encode()
	exp.Set("format", "csv")
	v.ExportCSV = "/audit/export?" + exp.Encode()
	if len(evs) == f.Limit {
		next := url.Values{}
		for k, vs := range q {
			next[k] = vs
		}
		next.Set("before", evs[len(evs)-1].ID)
		v.NextURL = "/audit?" + next.Encode()
	}
	if filterErrs != nil {
		v.ExportCSV, v.ExportJSONL, v.NextURL = "", "", "" // they would carry the bad filter
	}
	return render(c, status, views.Audit(h.page(c, "Audit log", "audit"), v))
}

// exportRecord is one exported event: the event's own fields (tenant_id,
// actor_*, code, time, outcome, ...) and the tenant's slug, so a line read
// on its own still says whose it is.
func exportRecord(e audit.Event, tenant string) api.AuditEvent {
	return api.AuditEvent{ID: e.ID, TenantID: e.TenantID, Time: e.Time.Format(time.RFC3339Nano), Code: e.Code, Type: e.Type,
		ActorKind: e.ActorKind, ActorID: e.ActorID, ActorName: e.ActorName, TargetKind: e.TargetKind, TargetID: e.TargetID,
		Outcome: e.Outcome, Details: e.Details, RemoteAddr: e.RemoteAddr, RequestID: e.RequestID, Tenant: tenant}
}

// AuditExport streams the filtered audit log as JSONL (default), CSV or a
// JSON array, without holding it in memory. The export itself is audited.
func (h *Handlers) AuditExport(c echo.Context) error {
	cl := CallerOf(c)
	ctx := c.Request().Context()
	f, err := auditFilter(c.QueryParams())
	if err != nil {
		return err
	}
	f.Before = ""
	if err := h.resolveActor(ctx, cl.Tenant.ID, &f); err != nil {
		return err
	}
	format := c.QueryParam("format")
	if format == "" {
		format = "jsonl"
	}
	if format != "jsonl" && format != "csv" && format != "json" {
		return errdefs.Invalid("format", "enum", `must be "jsonl", "csv" or "json"`)
	}
	if err := h.audit.Record(ctx, cl.Actor(c).Event(cl.Tenant.ID, audit.TypeAuditExported, "tenant", cl.Tenant.ID,
		map[string]any{"format": format, "filter": exportFilter(c.QueryParams())})); err != nil {
		return err
	}
	w := c.Response()
	name := "audit-" + cl.Tenant.Slug + "-" + h.clock().UTC().Format("20060102T150405Z")
	switch format {
	case "csv":
		w.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
		w.Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.csv"`)
	case "json":
		w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	default:
		w.Header().Set(echo.HeaderContentType, "application/jsonl")
		w.Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.jsonl"`)
	}
	w.WriteHeader(http.StatusOK)
	cw := csvexport.NewWriter(w)
	enc := json.NewEncoder(w)
	first := true
	switch format {
	case "csv":
		_ = cw.Write([]string{"id", "time", "code", "type", "outcome", "actor_kind", "actor_id", "actor_name", "target_kind", "target_id", "remote_addr", "request_id", "details", "tenant_id", "tenant"})
	case "json":
		_, _ = w.Write([]byte("["))
	}
	err = h.audit.Stream(ctx, cl.Tenant.ID, f, func(e audit.Event) error {
		switch format {
		case "csv":
			d := ""
			if len(e.Details) > 0 {
				b, _ := json.Marshal(e.Details)
				d = string(b)
			}
			return cw.Write([]string{e.ID, e.Time.UTC().Format(time.RFC3339Nano), e.Code, e.Type, e.Outcome, e.ActorKind, e.ActorID, e.ActorName, e.TargetKind, e.TargetID, e.RemoteAddr, e.RequestID, d, e.TenantID, cl.Tenant.Slug})
		case "json":
			if !first {
				_, _ = w.Write([]byte(","))
			}
			first = false
			return enc.Encode(exportRecord(e, cl.Tenant.Slug))
		}
		return enc.Encode(exportRecord(e, cl.Tenant.Slug))
	})
	if format == "csv" {
		cw.Flush()
	}
	if format == "json" {
		_, _ = w.Write([]byte("]\n"))
	}
	if err != nil {
		// The status is already sent; the truncated body and the log say it failed.
		h.log.ErrorContext(ctx, "audit export failed", "err", err)
	}
	return nil
}

// exportFilter is the filter of an export as audited: what was asked for.
func exportFilter(q url.Values) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"type", "actor", "outcome", "since", "until", "q"} {
		if v := q.Get(k); v != "" {
			out[k] = v
		}
	}
	return out
}
