package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/views"
)

// Dashboard is the tenant overview.
func (h *Handlers) Dashboard(c echo.Context) error {
	ctx := c.Request().Context()
	cl := CallerOf(c)
	v := views.DashboardView{TenantName: cl.Tenant.Name, Role: string(cl.Role)}
	n := nav(c)
	if mayOpen(c, "/settings/members") {
		v.MembersHref = "/settings/members"
		ms, err := h.store.ListMembers(ctx, cl.Tenant.ID)
		if err != nil {
			return err
		}
		v.Members = len(ms)
	}
	if mayOpen(c, "/settings/tokens") {
		v.TokensHref = "/settings/tokens"
		ts, err := h.store.ListTokens(ctx, cl.Tenant.ID)
		if err != nil {
			return err
		}
		// The count is of the tokens the page lists the caller: every
		// one to those who may read them all, else their own.
		all := tenants.Can(cl.Role, tenants.PermTokensRead)
		now := h.clock()
		for _, t := range ts {
			own := cl.User != nil && t.CreatedByUserID != nil && *t.CreatedByUserID == cl.User.ID
			if t.RevokedAt == nil && t.ExpiresAt.After(now) && (all || own) {
				v.ActiveTokens++
			}
		}
	}
	if mayOpen(c, "/audit") {
		v.AuditHref = "/audit"
		evs, err := h.audit.List(ctx, cl.Tenant.ID, audit.Filter{Limit: 8})
		if err != nil {
			return err
		}
		v.RecentAudit = auditRows(evs)
	}
	v.Quota = h.quotaWarningsView(c)
	// The area cards: the pages of the navigation with a summary.
	for _, it := range n.Main {
		if it.Summary != "" {
			v.Areas = append(v.Areas, views.AreaCard{Title: it.Label, Href: it.Href, Summary: it.Summary})
		}
	}
	return render(c, http.StatusOK, views.Dashboard(h.page(c, "Dashboard", "dashboard"), v))
}
