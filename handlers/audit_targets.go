package handlers

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/views"
)

// auditTargets names the objects of audit events as people know them (a
// member's email, a token's or secret's name, the short id the lists
// show) and links each to its page when the caller may open it. The
// tenant's members, tokens and secrets are read once per page.
type auditTargets struct {
	c                      echo.Context
	members, tokens, names map[string]string // id -> email / token name / secret name
}

func (h *Handlers) auditTargets(c echo.Context, tenantID string) (*auditTargets, error) {
	ctx := c.Request().Context()
	t := &auditTargets{c: c, members: map[string]string{}, tokens: map[string]string{}, names: map[string]string{}}
	if err := h.auditNames(ctx, tenantID, t); err != nil {
		return nil, err
	}
	return t, nil
}

func (h *Handlers) auditNames(ctx context.Context, tenantID string, t *auditTargets) error {
	if tenantID == "" {
		return nil
	}
	ms, err := h.store.ListMembers(ctx, tenantID)
	if err != nil {
		return err
	}
	for _, m := range ms {
		t.members[m.ID] = m.Email
		if m.UserID != nil {
			t.members[*m.UserID] = m.Email
		}
	}
	ts, err := h.store.ListTokens(ctx, tenantID)
	if err != nil {
		return err
	}
	for _, tk := range ts {
		t.tokens[tk.ID] = tk.Name
	}
	ss, err := h.secrets.List(ctx, tenantID)
	if err != nil {
		return err
	}
	for _, s := range ss {
		t.names[s.ID] = s.Name
	}
	return nil
}

// target is the label and link of e's object; the link is empty when the
// caller may not open it (no link to a refusal) or it has no page.
func (t *auditTargets) target(e audit.Event) (label, href string) {
	id := e.TargetID
	detail := func(k string) string { s, _ := e.Details[k].(string); return s }
	or := func(names ...string) string {
		for _, n := range names {
			if n != "" {
				return n
			}
		}
		return views.ShortID(id)
	}
	switch e.TargetKind {
	case "":
		return "", ""
	case "sandbox":
		label, href = "sandbox "+views.ShortID(id), "/sandboxes/"+id
	case "terminal":
		label, href = "terminal "+views.ShortID(id), "/terminals/"+id
	case "workflow_run":
		label, href = "run "+views.ShortID(id), "/runs/"+id
		if w := detail("workflow"); w != "" {
			label = "run " + views.ShortID(id) + " of " + w
		}
	case "workflow":
		label, href = "workflow "+id, "/workflows/"+id
	case "policy":
		label, href = "policy version "+id, "/policy/versions/"+id
	case "probe_run":
		label, href = "probe run "+views.ShortID(id), "/compliance/probes/"+id
	case "membership", "user":
		label, href = "member "+or(t.members[id], detail("email")), "/settings/members"
	case "token":
		label, href = "token "+or(t.tokens[id], detail("name")), "/settings/tokens"
	case "secret":
		label, href = "secret "+or(t.names[id], detail("secret_name"), detail("name")), "/settings/secrets"
	case "webhook_endpoint":
		label, href = "webhook "+or(detail("url")), "/settings/integrations"
	case "vm", "vm_pool":
		label, href = "VM "+views.ShortID(id), "/vms"
		if e.TargetKind == "vm_pool" {
			label = "VM pool"
		}
	case "tenant":
		if cl := CallerOf(t.c); cl.Tenant.ID == id && cl.Tenant.Name != "" {
			return "tenant " + cl.Tenant.Name, ""
		}
		return "tenant " + views.ShortID(id), ""
	case "usage":
		label, href = "usage "+id, "/usage"
	case "compliance_item":
		label, href = "compliance item "+id, "/compliance"
	default:
		return e.TargetKind + " " + views.ShortID(id), ""
	}
	if !mayOpen(t.c, href) {
		href = ""
	}
	return label, href
}

// rows is auditRows with the targets named and linked and the details as
// key/value pairs.
func (t *auditTargets) rows(evs []audit.Event) []views.AuditRow {
	rows := auditRows(evs)
	for i, e := range evs {
		rows[i].Target, rows[i].TargetHref = t.target(e)
		rows[i].Pairs = views.DetailPairs(e.Details)
	}
	return rows
}

// people names the actors pages record by id (who invited a member, who
// set a price): a user's email, a token's name; an id it does not know
// (a system actor, a user since deleted) stays as it is.
type people struct {
	h     *Handlers
	ctx   context.Context
	known map[string]string
}

func (h *Handlers) people(ctx context.Context, tenantID string) (*people, error) {
	t := &auditTargets{members: map[string]string{}, tokens: map[string]string{}, names: map[string]string{}}
	if err := h.auditNames(ctx, tenantID, t); err != nil {
		return nil, err
	}
	p := &people{h: h, ctx: ctx, known: t.members}
	for id, name := range t.tokens {
		p.known[id] = "token " + name
	}
	return p, nil
}

func (p *people) name(id string) string {
	if id == "" {
		return ""
	}
	if n, ok := p.known[id]; ok {
		return n
	}
	n := id
	if u, err := p.h.store.UserByID(p.ctx, id); err == nil {
		n = u.Email
	}
	p.known[id] = n
	return n
}
