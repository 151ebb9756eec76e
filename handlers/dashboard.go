package handlers

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/views"
)

// What the dashboard shows.
const (
	dashDays      = 14                 // of the activity chart and the run figures
	dashRows      = 8                  // rows of the recent activity
	dashList      = 5                  // rows of the smaller lists
	dashExpiring  = 7 * 24 * time.Hour // a secret expiring this soon is counted
	dashDenials   = 7 * 24 * time.Hour // the span of the recent denials
	dashRunsFetch = 100                // runs read for the caller's own recent runs
)

// Dashboard is the tenant overview: the figures the caller's role comes
// for. A figure, panel or link is there only when the caller may open the
// page it links to (mayOpen: the route table's permissions, as the
// navigation), so nothing the role may not read is shown, not even as 0.
func (h *Handlers) Dashboard(c echo.Context) error {
	cl := CallerOf(c)
	v := views.DashboardView{TenantName: cl.Tenant.Name, Role: string(cl.Role)}
	d := dashboard{h: h, c: c, cl: cl, tid: cl.Tenant.ID, now: h.clock().UTC(), v: &v}
	ctx := c.Request().Context()
	for _, part := range []func(context.Context) error{d.sandboxes, d.terminals, d.runs, d.usage, d.compliance, d.audit, d.people, d.operator} {
		if err := part(ctx); err != nil {
			return err
		}
	}
	v.Quota = h.quotaWarningsView(c)
	// The area cards: the pages of the navigation with a summary.
	for _, it := range nav(c).Main {
		if it.Summary != "" {
			v.Areas = append(v.Areas, views.AreaCard{Title: it.Label, Href: it.Href, Summary: it.Summary})
		}
	}
	return render(c, http.StatusOK, views.Dashboard(h.page(c, "Dashboard", views.NavDashboard), v))
}

// OperatorDashboard is the platform operators' overview (GET /operator):
// hosts, tenants near a quota, frozen tenants.
func (h *Handlers) OperatorDashboard(c echo.Context) error {
	o, err := h.operatorPanel(c.Request().Context())
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.OperatorDashboard(h.page(c, "Platform", views.NavPlatform), o))
}

// dashboard builds one request's DashboardView, part by part.
type dashboard struct {
	h   *Handlers
	c   echo.Context
	cl  *Caller
	tid string
	now time.Time
	v   *views.DashboardView
	// sbs are the tenant's sandboxes, read once for the tiles and names.
	sbs map[string]sandbox.Sandbox
	// days are the activity chart's, when a part reads them.
	activity *views.ActivityPanel
}

func (d *dashboard) may(path string) bool { return mayOpen(d.c, path) }

func (d *dashboard) tile(t views.Tile) { d.v.Tiles = append(d.v.Tiles, t) }

// mine says whether the dashboard is the caller's own work rather than the
// tenant's: a developer's.
func (d *dashboard) mine() bool { return d.cl.Role == tenants.RoleDeveloper && d.cl.User != nil }

func (d *dashboard) since() time.Time {
	return d.now.Truncate(24*time.Hour).AddDate(0, 0, -(dashDays - 1))
}

func (d *dashboard) activityPanel() *views.ActivityPanel {
	if d.activity == nil {
		d.activity = &views.ActivityPanel{}
		for day := d.since(); !day.After(d.now); day = day.Add(24 * time.Hour) {
			d.activity.Days = append(d.activity.Days, views.ActivityDay{Day: day})
		}
		d.v.Activity = d.activity
	}
	return d.activity
}

func (d *dashboard) sandboxes(ctx context.Context) error {
	if !d.may("/sandboxes") {
		return nil
	}
	list, err := d.h.sbx.List(ctx, d.tid)
	if err != nil {
		return err
	}
	d.sbs = make(map[string]sandbox.Sandbox, len(list))
	running, mine := 0, 0
	for _, sb := range list {
		d.sbs[sb.ID] = sb
		if sb.State.Active() {
			running++
			if d.cl.User != nil && sb.CreatedBy == d.cl.User.ID {
				mine++
			}
		}
	}
	if d.mine() {
		d.tile(views.Tile{ID: "sandboxes-running", Label: plural(mine, "sandbox of yours running", "sandboxes of yours running"),
			Value: strconv.Itoa(mine), Note: fmt.Sprintf("%d in the tenant", running), Href: "/sandboxes"})
	} else {
		d.tile(views.Tile{ID: "sandboxes-running", Label: plural(running, "sandbox running", "sandboxes running"), Value: strconv.Itoa(running), Href: "/sandboxes"})
	}
	days, err := d.h.sbx.Store().DailyCreated(ctx, d.tid, d.since(), d.now)
	if err != nil {
		return err
	}
	a := d.activityPanel()
	a.ShowSandboxes, a.SandboxesHref = true, "/sandboxes"
	for i, day := range days {
		if i < len(a.Days) {
			a.Days[i].Sandboxes = day.Created
			a.Sandboxes += day.Created
		}
	}
	return nil
}

func (d *dashboard) terminals(ctx context.Context) error {
	if !d.may("/terminals") {
		return nil
	}
	live := d.h.terms.Live(d.tid, "")
	d.v.TerminalsHref = "/terminals"
	d.tile(views.Tile{ID: "terminals-live", Label: plural(len(live), "live terminal", "live terminals"), Value: strconv.Itoa(len(live)), Href: "/terminals"})
	for i := len(live) - 1; i >= 0 && len(d.v.Terminals) < dashList; i-- { // newest first
		l := live[i]
		d.v.Terminals = append(d.v.Terminals, views.LiveTerminalRow{Href: "/terminals/" + url.PathEscape(l.ID), Sandbox: d.sandboxName(l.SandboxID),
			Driver: l.Now.Driver, Watchers: len(l.Now.Watchers), Since: l.StartedAt})
	}
	return nil
}

func (d *dashboard) runs(ctx context.Context) error {
	if !d.may("/runs") {
		return nil
	}
	st := d.h.runs.Store()
	act, err := st.Activity(ctx, d.tid, d.since(), d.now, dashList)
	if err != nil {
		return err
	}
	a := d.activityPanel()
	a.ShowRuns, a.RunsHref = true, "/runs"
	for i, day := range act.Days {
		if i < len(a.Days) {
			a.Days[i].Runs, a.Days[i].Bad = day.Runs, day.Failures
		}
	}
	a.Runs, a.Finished = act.Runs, act.Succeeded+act.Failures
	list, err := st.List(ctx, d.tid, runs.Filter{Limit: dashRunsFetch})
	if err != nil {
		return err
	}
	me := d.cl.Actor(d.c).Name
	d.v.RunsHref, d.v.RunsMine = "/runs", d.mine()
	ran := 0
	for _, r := range list {
		if d.mine() && r.CreatedBy != me {
			continue
		}
		ran++
		if len(d.v.Runs) < dashList {
			by := r.CreatedBy
			if by == "" {
				by = r.Sender
			}
			d.v.Runs = append(d.v.Runs, views.RecentRun{Href: "/runs/" + url.PathEscape(r.ID), Title: fmt.Sprintf("%s #%d", r.Workflow, r.Number),
				State: string(r.State), By: by, At: r.CreatedAt})
		}
	}
	if d.mine() {
		t := views.Tile{ID: "runs-mine", Label: "recent runs of yours", Value: strconv.Itoa(ran), Href: "/runs"}
		if ran == dashRunsFetch {
			t.Value += "+"
		}
		if len(d.v.Runs) > 0 {
			t.Note = "last: " + d.v.Runs[0].State
			t.Tone = runTone(d.v.Runs[0].State)
		}
		d.tile(t)
		return nil
	}
	d.tile(views.Tile{ID: "runs", Label: fmt.Sprintf("runs in %d days", dashDays), Value: strconv.Itoa(act.Runs), Href: "/runs"})
	rate := views.Tile{ID: "runs-success", Label: "run success rate", Value: "—", Note: "no finished run yet", Href: "/runs"}
	if n := act.Succeeded + act.Failures; n > 0 {
		share := float64(act.Succeeded) / float64(n)
		rate.Value, rate.Note = percent(share), fmt.Sprintf("%d of %d finished", act.Succeeded, n)
		rate.Tone = "ok"
		if share < 0.8 {
			rate.Tone = "warn"
		}
	}
	d.tile(rate)
	if len(act.Workflows) > 0 || d.may("/workflows") {
		top := views.TopList{ID: "workflows", Title: "Top workflows", Href: "/workflows"}
		for _, w := range act.Workflows {
			top.Lines = append(top.Lines, views.TopLine{Label: w.Key, Value: plural(w.N, "1 run", strconv.Itoa(w.N)+" runs")})
		}
		d.v.Tops = append(d.v.Tops, top)
	}
	return nil
}

func runTone(state string) string {
	switch runs.State(state) {
	case runs.StateSucceeded:
		return "ok"
	case runs.StateFailed, runs.StateTimedOut:
		return "bad"
	}
	return ""
}

func (d *dashboard) usage(ctx context.Context) error {
	if !d.may("/usage") {
		return nil
	}
	m, err := d.h.usage.MonthToDate(ctx, d.tid, d.now)
	if err != nil {
		return err
	}
	p := views.CostPanel{Month: m.Month.Format("January 2006"), Total: usageTotalsView(m.Total), Forecast: m.Forecast, UsageHref: "/usage"}
	for _, day := range m.Days {
		p.Days = append(p.Days, views.UsageDay{Day: day.Day, UsageTotals: usageTotalsView(day.Totals)})
	}
	prevMonth := m.Month.AddDate(0, -1, 0).Format("January")
	if tr, ok := m.Trend(); ok {
		p.Trend = fmt.Sprintf("%s%s on %s's same days", sign(tr), percent(math.Abs(tr)), prevMonth)
	}
	if tenants.Can(d.cl.Role, tenants.PermUsageExport) {
		p.ExportHref = "/usage#usage-export-title"
	}
	d.v.Cost = &p
	cost := views.Tile{ID: "cost-mtd", Label: "cost this month", Value: p.Total.Cost.Cents + " " + p.Total.Currency, Note: p.Trend, Href: "/usage"}
	if p.Trend == "" {
		cost.Note = "nothing in " + prevMonth + " to compare"
	}
	d.tile(cost)
	d.tile(views.Tile{ID: "cost-forecast", Label: "forecast to month end", Value: strconv.FormatFloat(m.Forecast, 'f', 2, 64) + " " + p.Total.Currency, Href: "/usage"})
	lines, err := d.h.quotaLines(ctx, d.tid)
	if err != nil {
		return err
	}
	for _, l := range lines {
		if l.Name != tenants.QuotaMaxCPUHoursMonthly {
			continue
		}
		t := views.Tile{ID: "quota-cpu", Label: "CPU-hours of the monthly quota", Value: strconv.FormatFloat(l.Used, 'f', 1, 64),
			Note: "of " + strconv.FormatFloat(l.Limit, 'f', -1, 64) + " (" + percent(l.Share) + ")", Href: "/usage"}
		switch {
		case l.Over:
			t.Tone = "bad"
		case l.Warn:
			t.Tone = "warn"
		}
		d.tile(t)
	}
	if p.ExportHref != "" {
		d.tile(views.Tile{ID: "usage-export", Label: "billing export", Value: "CSV · JSON", Note: "FOCUS columns, this month", Href: p.ExportHref})
	}
	if d.cl.Role == tenants.RoleBilling {
		return nil // billing comes for the cost, not who ran what
	}
	top, err := d.h.usage.Top(ctx, d.tid, usage.Range{From: m.Month, To: d.now.Truncate(time.Hour).Add(time.Hour)}, usage.ByUser, dashList)
	if err != nil {
		return err
	}
	names, err := d.h.usage.UserNames(ctx, d.tid)
	if err != nil {
		return err
	}
	users := views.TopList{ID: "users", Title: "Top users this month", Href: "/usage"}
	for _, l := range top {
		label := names[l.Key]
		if label == "" {
			label = orNone(l.Key)
		}
		users.Lines = append(users.Lines, views.TopLine{Label: label, Value: l.Cost.Round(2) + " " + l.Currency})
	}
	d.v.Tops = append(d.v.Tops, users)
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sign(f float64) string {
	if f < 0 {
		return "−"
	}
	return "+"
}

func percent(share float64) string { return strconv.FormatFloat(share*100, 'f', 0, 64) + " %" }

func (d *dashboard) compliance(ctx context.Context) error {
	if !d.may("/compliance") {
		return nil
	}
	items, err := d.h.compliance.Items(ctx, d.tid)
	if err != nil {
		return err
	}
	p := views.CompliancePanel{Items: len(items), Href: "/compliance"}
	for _, it := range items {
		switch it.Status {
		case compliance.StatusPass:
			p.Pass++
		case compliance.StatusWarn:
			p.Warn++
		default:
			p.Fail++
		}
	}
	hist, err := d.h.compliance.History(ctx, d.tid, dashList)
	if err != nil {
		return err
	}
	for _, ch := range hist {
		p.Changes = append(p.Changes, views.ComplianceChange{ItemID: ch.ItemID, Question: compliance.Question(ch.ItemID), From: string(ch.From), To: string(ch.To), At: ch.At})
	}
	probes, err := d.h.compliance.ProbeRuns(ctx, d.tid, 1)
	if err != nil {
		return err
	}
	if d.may("/compliance/export") {
		p.ExportHref = "/compliance/export"
	}
	score := views.Tile{ID: "compliance-score", Label: "compliance items passing", Value: fmt.Sprintf("%d/%d", p.Pass, p.Items), Href: "/compliance", Tone: "ok"}
	switch {
	case p.Fail > 0:
		score.Tone, score.Note = "bad", plural(p.Fail, "1 failing", strconv.Itoa(p.Fail)+" failing")
	case p.Warn > 0:
		score.Tone, score.Note = "warn", plural(p.Warn, "1 warning", strconv.Itoa(p.Warn)+" warnings")
	}
	if len(p.Changes) > 0 {
		score.Note = joinNote(score.Note, "changed "+p.Changes[0].At.UTC().Format("Jan 2 15:04"))
	}
	d.tile(score)
	probe := views.Tile{ID: "probe", Label: "last probe", Value: "none yet", Note: "run it from Compliance", Href: "/compliance"}
	if len(probes) > 0 {
		r := probeRunView(probes[0])
		p.Probe = &r
		probe.Value = fmt.Sprintf("%d blocked", r.Blocked)
		probe.Note = fmt.Sprintf("%d escaped · %s", r.Escaped, r.StartedAt.UTC().Format("Jan 2 15:04"))
		probe.Tone = "ok"
		if r.Escaped > 0 || r.State == compliance.RunFailed {
			probe.Tone = "bad"
		}
		if link := "/compliance/probes/" + url.PathEscape(r.ID); d.may(link) {
			probe.Href = link
		}
	}
	d.tile(probe)
	d.v.Compliance = &p
	return nil
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + " · " + b
}

func (d *dashboard) audit(ctx context.Context) error {
	if !d.may("/audit") {
		return nil
	}
	d.v.AuditHref = "/audit"
	denials := audit.Filter{Outcome: audit.OutcomeDenied, Since: d.now.Add(-dashDenials)}
	n, err := d.h.audit.Count(ctx, d.tid, denials)
	if err != nil {
		return err
	}
	t := views.Tile{ID: "denials", Label: "denials in 7 days", Value: strconv.FormatInt(n, 10), Href: "/audit?outcome=" + audit.OutcomeDenied}
	if n > 0 {
		denials.Limit = 1
		latest, err := d.h.audit.List(ctx, d.tid, denials)
		if err != nil {
			return err
		}
		if len(latest) == 1 {
			t.Note, t.Tone = "latest: "+latest[0].Type, "warn"
		}
	}
	d.tile(t)
	d.tile(views.Tile{ID: "audit-export", Label: "audit export", Value: "CSV · JSONL", Note: "the whole log, filtered as on the page", Href: "/audit"})
	rows, err := d.h.audit.Recent(ctx, d.tid, dashRows)
	if err != nil {
		return err
	}
	names, err := d.memberNames(ctx)
	if err != nil {
		return err
	}
	for _, r := range rows {
		d.v.Recent = append(d.v.Recent, d.recentRow(r, names))
	}
	return nil
}

// memberNames are the tenant's members' emails by membership id, for
// targets; empty when the caller may not list members.
func (d *dashboard) memberNames(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	if !d.may("/settings/members") {
		return out, nil
	}
	ms, err := d.h.store.ListMembers(ctx, d.tid)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		out[m.ID] = m.Email
	}
	return out, nil
}

// sandboxName is how the dashboard names a sandbox: its short id and
// template.
func (d *dashboard) sandboxName(id string) string {
	if sb, ok := d.sbs[id]; ok && sb.Template != "" {
		return shortID(id) + " · " + sb.Template
	}
	return shortID(id)
}

// recentRow names a folded event's actor and target for people, with
// links to their pages where the caller may open them.
func (d *dashboard) recentRow(f audit.Folded, members map[string]string) views.RecentRow {
	e := f.Event
	r := views.RecentRow{Time: e.Time, First: f.First.Time, Count: f.Count, Type: e.Type, Outcome: e.Outcome, Actor: e.ActorName}
	if r.Actor == "" {
		r.Actor = e.ActorKind
	}
	if e.ActorID != "" {
		r.ActorHref = "/audit?actor=" + url.QueryEscape(e.ActorID)
	}
	detail := func(k string) string { s, _ := e.Details[k].(string); return s }
	link := func(href string) string {
		if d.may(href) {
			return href
		}
		return ""
	}
	switch e.TargetKind {
	case "sandbox":
		r.Target, r.Href = "sandbox "+d.sandboxName(e.TargetID), link("/sandboxes/"+url.PathEscape(e.TargetID))
	case "workflow_run":
		name := "run " + shortID(e.TargetID)
		if wf := detail("workflow"); wf != "" {
			name = "run " + wf
			if n, ok := e.Details["number"].(float64); ok {
				name += " #" + strconv.Itoa(int(n))
			}
		}
		r.Target, r.Href = name, link("/runs/"+url.PathEscape(e.TargetID))
	case "workflow":
		r.Target, r.Href = "workflow "+e.TargetID, link("/workflows/"+url.PathEscape(e.TargetID))
	case "terminal":
		r.Target, r.Href = "terminal "+shortID(e.TargetID), link("/terminals/"+url.PathEscape(e.TargetID))
	case "probe_run":
		r.Target, r.Href = "probe run "+shortID(e.TargetID), link("/compliance/probes/"+url.PathEscape(e.TargetID))
	case "membership":
		who := members[e.TargetID]
		if who == "" {
			who = detail("email")
		}
		r.Target, r.Href = "member "+orNone(who), link("/settings/members")
	case "secret":
		r.Target, r.Href = "secret "+orNone(detail("secret_name")), link("/settings/secrets")
	case "token":
		r.Target, r.Href = "token "+orNone(detail("name")), link("/settings/tokens")
	case "vm":
		r.Target, r.Href = "VM "+shortID(e.TargetID), link("/vms")
	case "tenant":
		r.Target = "tenant " + d.cl.Tenant.Name
	case "":
	default:
		r.Target = e.TargetKind + " " + shortID(e.TargetID)
	}
	if h := detail("host"); h != "" {
		r.Detail = h
	}
	if f.Count > 1 {
		r.Detail = joinNote(r.Detail, "since "+f.First.Time.UTC().Format("Jan 2 15:04:05"))
	}
	return r
}

func (d *dashboard) people(ctx context.Context) error {
	if d.may("/settings/members") {
		ms, err := d.h.store.ListMembers(ctx, d.tid)
		if err != nil {
			return err
		}
		d.v.MembersHref, d.v.Members = "/settings/members", len(ms)
		if tenants.Can(d.cl.Role, tenants.PermMembersWrite) {
			pending := 0
			for _, m := range ms {
				if !m.Active() {
					pending++
				}
			}
			d.tile(views.Tile{ID: "invitations", Label: plural(pending, "pending invitation", "pending invitations"), Value: strconv.Itoa(pending), Href: "/settings/members"})
		}
	}
	if d.may("/settings/tokens") {
		ts, err := d.h.store.ListTokens(ctx, d.tid)
		if err != nil {
			return err
		}
		// The count is of the tokens the page lists the caller: every
		// one to those who may read them all, else their own.
		all := tenants.Can(d.cl.Role, tenants.PermTokensRead)
		d.v.TokensHref = "/settings/tokens"
		for _, t := range ts {
			own := d.cl.User != nil && t.CreatedByUserID != nil && *t.CreatedByUserID == d.cl.User.ID
			if t.RevokedAt == nil && t.ExpiresAt.After(d.now) && (all || own) {
				d.v.ActiveTokens++
			}
		}
	}
	if d.may("/settings/secrets") && tenants.Can(d.cl.Role, tenants.PermSecretsWrite) {
		ss, err := d.h.secrets.List(ctx, d.tid)
		if err != nil {
			return err
		}
		soon, expired := 0, 0
		for _, s := range ss {
			switch {
			case s.State == secrets.StateExpired:
				expired++
			case s.State == secrets.StateActive && s.ExpiresAt != nil && s.ExpiresAt.Sub(d.now) < dashExpiring:
				soon++
			}
		}
		t := views.Tile{ID: "secrets-expiring", Label: "secrets expiring in 7 days", Value: strconv.Itoa(soon), Href: "/settings/secrets"}
		if expired > 0 {
			t.Note, t.Tone = fmt.Sprintf("%d expired, not revoked", expired), "warn"
		}
		if soon > 0 {
			t.Tone = "warn"
		}
		d.tile(t)
	}
	return nil
}

func (d *dashboard) operator(ctx context.Context) error {
	if !d.may("/operator/hosts") {
		return nil
	}
	o, err := d.h.operatorPanel(ctx)
	if err != nil {
		return err
	}
	d.v.Operator = &o
	return nil
}

// operatorPanel reads the platform's hosts, the tenants at WarnAt of a
// quota or more, and the frozen tenants.
func (h *Handlers) operatorPanel(ctx context.Context) (views.OperatorPanel, error) {
	var o views.OperatorPanel
	hs, err := h.vms.Hosts(ctx)
	if err != nil {
		return o, err
	}
	for _, j := range hostRows(hs) {
		o.Hosts = append(o.Hosts, views.OperatorHost{Name: j.URI, State: j.Health, VMs: j.VMs})
	}
	ts, err := h.store.ListTenants(ctx)
	if err != nil {
		return o, err
	}
	frozen, err := h.store.FrozenTenants(ctx)
	if err != nil {
		return o, err
	}
	for _, t := range ts {
		if f, ok := frozen[t.ID]; ok {
			o.Frozen = append(o.Frozen, views.FrozenRow{Slug: t.Slug, Href: "/operator/tenants", Reason: f.Reason, Since: f.Since})
		}
		lines, err := h.quotaLines(ctx, t.ID)
		if err != nil {
			return o, err
		}
		for _, l := range lines {
			if l.Warn {
				o.Near = append(o.Near, views.NearQuotaRow{Slug: t.Slug, Href: "/operator/tenants", Quota: l.Label,
					Share: percent(l.Share), Over: l.Over})
			}
		}
	}
	return o, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
