package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

func roleNames() []string {
	out := make([]string, len(tenants.Roles))
	for i, r := range tenants.Roles {
		out[i] = string(r)
	}
	return out
}

func (h *Handlers) membersView(c echo.Context, form views.InviteForm) (views.MembersView, error) {
	cl := CallerOf(c)
	ms, err := h.store.ListMembers(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return views.MembersView{}, err
	}
	v := views.MembersView{CanEdit: tenants.Can(cl.Role, tenants.PermMembersWrite), Roles: roleNames(), Form: form}
	who, err := h.people(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return views.MembersView{}, err
	}
	for _, m := range ms {
		v.Rows = append(v.Rows, views.MemberRow{
			ID: m.ID, Email: m.Email, Role: string(m.Role), Active: m.Active(),
			InvitedBy: who.name(m.InvitedBy), CreatedAt: m.CreatedAt,
		})
	}
	return v, nil
}

// Members lists the tenant's members.
func (h *Handlers) Members(c echo.Context) error {
	v, err := h.membersView(c, views.InviteForm{Role: string(tenants.RoleDeveloper)})
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Members(h.page(c, "Members", "members"), v))
}

// InviteMember adds a member by email from the members page.
func (h *Handlers) InviteMember(c echo.Context) error {
	cl := CallerOf(c)
	form := views.InviteForm{Email: strings.TrimSpace(c.FormValue("email")), Role: c.FormValue("role")}
	_, err := h.store.InviteMember(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, form.Email, tenants.Role(form.Role))
	if err != nil {
		return reshow(c, err, refusal{Conflict: &errdefs.FieldError{Field: "email", Rule: "member_exists", Detail: "is already a member of this tenant"}},
			&form.Errors, func() (templ.Component, error) {
				v, err := h.membersView(c, form)
				return views.Members(h.page(c, "Members", "members"), v), err
			})
	}
	h.flash(c, "success", "Invited "+form.Email+" as "+form.Role+". The membership activates at their first sign-in.")
	return redirect(c, "/settings/members")
}

// SetMemberRole changes a member's role from the members page.
func (h *Handlers) SetMemberRole(c echo.Context) error {
	cl := CallerOf(c)
	role := c.FormValue("role")
	if err := h.store.SetMemberRole(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), tenants.Role(role)); err != nil {
		if errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrInvalid) {
			h.flash(c, "error", "Role not changed: "+err.Error())
			return redirect(c, "/settings/members")
		}
		return err
	}
	h.flash(c, "success", "Role changed to "+role+".")
	return redirect(c, "/settings/members")
}

// RemoveMember removes a member from the members page, confirmed.
func (h *Handlers) RemoveMember(c echo.Context) error {
	cl := CallerOf(c)
	ms, err := h.store.ListMembers(c.Request().Context(), cl.Tenant.ID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ms, func(m tenants.Membership) bool { return m.ID == c.Param("id") })
	if i < 0 {
		return fmt.Errorf("member %s: %w", c.Param("id"), errdefs.ErrNotFound)
	}
	if asked, err := h.askFirst(c, views.ConfirmView{Title: "Remove " + ms[i].Email,
		Summary: []string{"Removing " + ms[i].Email + " (" + string(ms[i].Role) + ") from this tenant ends their access at once: their sessions here stop working. Their past actions stay in the audit log."},
		Button:  "Remove member", Cancel: "/settings/members"}); asked {
		return err
	}
	if err := h.store.RemoveMember(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id")); err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			h.flash(c, "error", "Not removed: "+err.Error())
			return redirect(c, "/settings/members")
		}
		return err
	}
	h.flash(c, "success", "Member removed.")
	return redirect(c, "/settings/members")
}

func memberJSON(m tenants.Membership) api.Member {
	return api.Member{ID: m.ID, Email: m.Email, Role: string(m.Role), Active: m.Active(), InvitedBy: m.InvitedBy, CreatedAt: m.CreatedAt.UTC().Format(timeJSON)}
}

// APIMembers lists members.
func (h *Handlers) APIMembers(c echo.Context) error {
	ms, err := h.store.ListMembers(c.Request().Context(), CallerOf(c).Tenant.ID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.MemberList{Members: each(ms, memberJSON)})
}

// APIInviteMember invites a member: {email, role}.
func (h *Handlers) APIInviteMember(c echo.Context) error {
	var in api.InviteMember
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	m, err := h.store.InviteMember(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, strings.TrimSpace(in.Email), tenants.Role(in.Role))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, memberJSON(m))
}

// APIUpdateMember changes a member's role: {role}.
func (h *Handlers) APIUpdateMember(c echo.Context) error {
	var in api.UpdateMember
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	if err := h.store.SetMemberRole(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), tenants.Role(in.Role)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// APIRemoveMember removes a member.
func (h *Handlers) APIRemoveMember(c echo.Context) error {
	cl := CallerOf(c)
	if err := h.store.RemoveMember(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

const timeJSON = "2006-01-02T15:04:05Z07:00"
