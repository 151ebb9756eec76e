package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/views"
)

// Compliance is what the compliance pages and API need of the checklist
// service; *compliance.Service implements it.
type Compliance interface {
	// Items returns the latest evaluation (evaluating if there is none).
	Items(ctx context.Context, tenantID string) ([]compliance.Item, error)
	History(ctx context.Context, tenantID string, limit int) ([]compliance.Change, error)
	// RunProbe runs the probe in a sandbox of the tenant and blocks until
	// it is done.
	RunProbe(ctx context.Context, actor audit.Actor, tenantID string) (compliance.ProbeRun, error)
	ProbeRuns(ctx context.Context, tenantID string, limit int) ([]compliance.ProbeRun, error)
	// ProbeRun returns one run; another tenant's is errdefs.ErrNotFound.
	ProbeRun(ctx context.Context, tenantID, id string) (compliance.ProbeRun, error)
	// Incident is the tenant's incident-response process: its policy's
	// contacts and runbook, else the platform's.
	Incident(ctx context.Context, tenantID string) (compliance.Incident, error)
}

// Page sizes of the compliance page and API.
const (
	complianceHistoryLimit = 100
	complianceProbesLimit  = 10
)

// Kept so its call sites stay as they are; every service is required
// (handlers.New), so it never fails.
func (h *Handlers) complianceService() (Compliance, error) { return h.compliance, nil }

// complianceView gathers everything the compliance page shows.
func (h *Handlers) complianceView(c echo.Context, print bool) (views.ComplianceView, error) {
	ctx, cl := c.Request().Context(), CallerOf(c)
	v := views.ComplianceView{CanRun: tenants.Can(cl.Role, tenants.PermComplianceRun), Print: print}
	if f, frozen, err := h.store.TenantFreeze(ctx, cl.Tenant.ID); err != nil {
		return v, err
	} else if frozen {
		v.Freeze = &views.FreezeView{Since: f.Since, Reason: f.Reason, By: f.By}
	}
	if h.pol != nil {
		cur, err := h.pol.Current(ctx, cl.Tenant.ID)
		if err != nil {
			return v, err
		}
		inc := compliance.ResolveIncident(cur, compliance.Platform{})
		if h.compliance != nil {
			if inc, err = h.compliance.Incident(ctx, cl.Tenant.ID); err != nil {
				return v, err
			}
		}
		v.Incident = views.IncidentView{PolicyVersion: inc.PolicyVersion, Contacts: inc.Contacts, ContactsFrom: inc.ContactsFrom,
			RunbookURL: inc.RunbookURL, RunbookFrom: inc.RunbookFrom, OnEgressDenied: inc.OnEgressDenied}
	}
	svc, err := h.complianceService()
	if err != nil {
		v.Unavailable = "The compliance service is not running on this server."
		v.CanRun = false
		return v, nil
	}
	items, err := svc.Items(ctx, cl.Tenant.ID)
	if err != nil {
		return v, err
	}
	for _, it := range items {
		iv := itemView(it)
		for i, e := range iv.Evidence { // no link to a page the caller would be refused
			if e.Link != "" && !mayOpen(c, e.Link) {
				iv.Evidence[i].Link = ""
			}
		}
		v.Items = append(v.Items, iv)
		if it.CheckedAt.After(v.CheckedAt) {
			v.CheckedAt = it.CheckedAt
		}
	}
	hist, err := svc.History(ctx, cl.Tenant.ID, complianceHistoryLimit)
	if err != nil {
		return v, err
	}
	for _, ch := range hist {
		v.History = append(v.History, views.ComplianceChange{ItemID: ch.ItemID, Question: compliance.Question(ch.ItemID),
			From: string(ch.From), To: string(ch.To), At: ch.At})
	}
	runs, err := svc.ProbeRuns(ctx, cl.Tenant.ID, complianceProbesLimit)
	if err != nil {
		return v, err
	}
	for _, r := range runs {
		v.Probes = append(v.Probes, probeRunView(r))
	}
	return v, nil
}

func itemView(it compliance.Item) views.ComplianceItem {
	out := views.ComplianceItem{ID: it.ID, Question: it.Question, Status: string(it.Status), Since: it.Since, CheckedAt: it.CheckedAt}
	for _, e := range it.Evidence {
		out.Evidence = append(out.Evidence, views.ComplianceEvidence{Kind: e.Kind, Text: e.Text, Link: localLink(e.Link)})
	}
	return out
}

// localLink keeps evidence links on this site: a path of ours, or nothing.
func localLink(l string) string {
	if len(l) > 1 && l[0] == '/' && l[1] != '/' && l[1] != '\\' {
		return l
	}
	return ""
}

func probeRunView(r compliance.ProbeRun) views.ProbeRunRow {
	out := views.ProbeRunRow{ID: r.ID, SandboxID: r.SandboxID, State: r.State, StartedAt: r.StartedAt, EndedAt: r.EndedAt, Output: r.Output}
	for _, ck := range r.Checks {
		switch ck.Outcome {
		case compliance.OutcomeBlocked:
			out.Blocked++
		case compliance.OutcomeEscaped:
			out.Escaped++
		default:
			out.Errors++
		}
		out.Checks = append(out.Checks, views.ProbeCheckRow{ID: ck.ID, Name: ck.Name, Outcome: ck.Outcome, Detail: ck.Detail})
	}
	return out
}

// CompliancePage is the checklist with its evidence, history and probe runs.
func (h *Handlers) CompliancePage(c echo.Context) error {
	v, err := h.complianceView(c, false)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Compliance(h.page(c, "Compliance", views.NavCompliance), v))
}

// CompliancePrint is the print-friendly checklist, every item open.
func (h *Handlers) CompliancePrint(c echo.Context) error {
	v, err := h.complianceView(c, true)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.CompliancePrint(h.page(c, "Compliance", views.NavCompliance), v))
}

// callerProbeRun is the caller's probe run :id.
func (h *Handlers) callerProbeRun(c echo.Context) (compliance.ProbeRun, error) {
	return h.compliance.ProbeRun(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id"))
}

// ComplianceProbePage shows one probe run.
func (h *Handlers) ComplianceProbePage(c echo.Context) error {
	r, err := h.callerProbeRun(c)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.ProbeRunPage(h.page(c, "Probe run", views.NavCompliance), probeRunView(r)))
}

// RunComplianceProbe runs the probe now (form post) and shows its run.
func (h *Handlers) RunComplianceProbe(c echo.Context) error {
	svc, err := h.complianceService()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	r, err := svc.RunProbe(c.Request().Context(), cl.Actor(c), cl.Tenant.ID)
	if err != nil {
		if r.ID == "" {
			return probeErr(err)
		}
		h.flash(c, views.FlashError, "The probe could not finish: "+err.Error())
	} else {
		h.flash(c, views.FlashSuccess, "The probe ran; the checklist is re-evaluated with its results.")
	}
	return redirect(c, "/compliance/probes/"+r.ID)
}

func probeRunOut(r compliance.ProbeRun, withOutput bool) api.ProbeRun {
	out := api.ProbeRun{ID: r.ID, SandboxID: r.SandboxID, State: r.State, StartedAt: r.StartedAt.UTC().Format(timeJSON), Checks: []api.ProbeCheck{}}
	for _, ch := range r.Checks {
		out.Checks = append(out.Checks, api.ProbeCheck(ch))
	}
	if r.EndedAt != nil {
		s := r.EndedAt.UTC().Format(timeJSON)
		out.EndedAt = &s
	}
	if withOutput {
		out.Output = r.Output
	}
	return out
}

// complianceJSON builds the API answer; full adds the probe runs' output
// and the incident-response section (the export).
func (h *Handlers) complianceJSON(ctx context.Context, svc Compliance, tn *tenants.Tenant, full bool) (api.Compliance, error) {
	items, err := svc.Items(ctx, tn.ID)
	if err != nil {
		return api.Compliance{}, err
	}
	hist, err := svc.History(ctx, tn.ID, complianceHistoryLimit)
	if err != nil {
		return api.Compliance{}, err
	}
	out := api.Compliance{Tenant: tn.Slug, Summary: map[string]int{"pass": 0, "warn": 0, "fail": 0},
		Items: make([]api.ComplianceItem, 0, len(items)), History: make([]api.ComplianceChange, 0, len(hist))}
	for _, ch := range hist {
		out.History = append(out.History, api.ComplianceChange{ItemID: ch.ItemID, From: string(ch.From), To: string(ch.To), At: ch.At.Format(time.RFC3339Nano)})
	}
	var latest string
	for _, it := range items {
		ev := make([]api.ComplianceEvidence, 0, len(it.Evidence))
		for _, e := range it.Evidence {
			ev = append(ev, api.ComplianceEvidence(e))
		}
		o := api.ComplianceItem{ID: it.ID, Question: it.Question, Status: string(it.Status), Evidence: ev,
			CheckedAt: it.CheckedAt.UTC().Format(timeJSON), Since: it.Since.UTC().Format(timeJSON)}
		if o.CheckedAt > latest {
			latest = o.CheckedAt
		}
		out.Summary[o.Status]++
		out.Items = append(out.Items, o)
	}
	if latest != "" {
		out.CheckedAt = &latest
	}
	runs, err := svc.ProbeRuns(ctx, tn.ID, complianceProbesLimit)
	if err != nil {
		return api.Compliance{}, err
	}
	out.Probes = []api.ProbeRun{}
	for _, r := range runs {
		out.Probes = append(out.Probes, probeRunOut(r, full))
	}
	if !full {
		return out, nil
	}
	if h.pol != nil {
		inc, err := svc.Incident(ctx, tn.ID)
		if err != nil {
			return api.Compliance{}, err
		}
		out.Incident = &api.Incident{PolicyVersion: inc.PolicyVersion, Contacts: inc.Contacts, ContactsFrom: inc.ContactsFrom,
			RunbookURL: inc.RunbookURL, RunbookFrom: inc.RunbookFrom}
		if f, frozen, err := h.store.TenantFreeze(ctx, tn.ID); err != nil {
			return api.Compliance{}, err
		} else if frozen {
			s := f.Since.UTC().Format(timeJSON)
			out.Incident.FrozenAt = &s
		}
	}
	return out, nil
}

// APICompliance returns every checklist item with its status, evidence,
// since and checked_at, and the recent status changes.
func (h *Handlers) APICompliance(c echo.Context) error {
	svc, err := h.complianceService()
	if err != nil {
		return err
	}
	out, err := h.complianceJSON(c.Request().Context(), svc, CallerOf(c).Tenant, false)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

// ComplianceExport downloads the checklist with its probe runs and the
// incident-response section as one JSON document; the export is audited.
func (h *Handlers) ComplianceExport(c echo.Context) error {
	svc, err := h.complianceService()
	if err != nil {
		return err
	}
	ctx, cl := c.Request().Context(), CallerOf(c)
	out, err := h.complianceJSON(ctx, svc, cl.Tenant, true)
	if err != nil {
		return err
	}
	body, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := h.audit.Record(ctx, cl.Actor(c).Event(cl.Tenant.ID, audit.TypeComplianceExported, "tenant", cl.Tenant.ID,
		map[string]any{"format": "json", "items": len(out.Items)})); err != nil {
		return err
	}
	name := "compliance-" + cl.Tenant.Slug + "-" + h.clock().UTC().Format("20060102T150405Z") + ".json"
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`"`)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, append(body, '\n'))
}

// APIRunComplianceProbe runs the probe now and answers its run (201), once
// it is done. A run that could not finish is still answered, with its state.
func (h *Handlers) APIRunComplianceProbe(c echo.Context) error {
	svc, err := h.complianceService()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	r, err := svc.RunProbe(c.Request().Context(), cl.Actor(c), cl.Tenant.ID)
	if err != nil && r.ID == "" {
		return probeErr(err)
	}
	return c.JSON(http.StatusCreated, probeRunOut(r, true))
}

// APIComplianceProbes lists the tenant's recent probe runs, newest first,
// without their output.
func (h *Handlers) APIComplianceProbes(c echo.Context) error {
	svc, err := h.complianceService()
	if err != nil {
		return err
	}
	runs, err := svc.ProbeRuns(c.Request().Context(), CallerOf(c).Tenant.ID, complianceProbesLimit)
	if err != nil {
		return err
	}
	out := each(runs, func(r compliance.ProbeRun) api.ProbeRun { return probeRunOut(r, false) })
	return c.JSON(http.StatusOK, api.ProbeRunList{ProbeRuns: out})
}

// APIComplianceProbe returns one probe run with its checks and output.
func (h *Handlers) APIComplianceProbe(c echo.Context) error {
	r, err := h.callerProbeRun(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, probeRunOut(r, true))
}

// probeErr maps a probe that could not start at all: without sandboxes on
// this server it is unavailable (503), not our failure.
func probeErr(err error) error {
	if errors.Is(err, compliance.ErrUnavailable) && !errors.Is(err, vmpool.ErrUnavailable) {
		return fmt.Errorf("%w: %w", vmpool.ErrUnavailable, err)
	}
	return err
}
