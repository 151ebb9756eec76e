package views

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"time"
)

// displayTime is how every time is shown: UTC, to the minute, unambiguous.
const displayTime = "2006-01-02 15:04 UTC"

func showTime(t time.Time) string { return t.UTC().Format(displayTime) }

func machineTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// asset returns the URL of a file under /static/, with the build's version as a
// query so that long cache lifetimes never serve a stale file after an upgrade.
func asset(p Page, path string) string {
	u := "/static/" + strings.TrimPrefix(path, "/")
	if p.AssetVersion != "" {
		u += "?v=" + url.QueryEscape(p.AssetVersion)
	}
	return u
}

// csrfHeaders is the hx-headers value that makes htmx send the CSRF token with
// every request it issues.
func csrfHeaders(token string) string {
	b, err := json.Marshal(map[string]string{"X-CSRF-Token": token})
	if err != nil {
		// A map of strings always marshals; keep the page renderable regardless.
		return "{}"
	}
	return string(b)
}

// pill returns the classes of a status pill: known roles and outcomes get their
// own colour, anything else the neutral one.
func pill(value string) string {
	switch strings.ToLower(value) {
	case "admin", "operator":
		return "pill pill-accent"
	case "success", "allowed", "allow", "ok", "active", "pass":
		return "pill pill-good"
	case "failure", "failed", "error", "denied", "deny", "revoked", "fail":
		return "pill pill-bad"
	case "warn", "warning", "expired", "invited", "pending":
		return "pill pill-warn"
	default:
		return "pill"
	}
}

func flashClass(kind string) string {
	switch kind {
	case FlashSuccess, FlashError, FlashWarn:
		return "flash flash-" + kind
	default:
		return "flash flash-info"
	}
}

// flashRole makes errors interrupt a screen reader and other messages wait.
func flashRole(kind string) string {
	if kind == FlashError {
		return "alert"
	}
	return "status"
}

func displayName(u User) string {
	if u.Name != "" {
		return u.Name
	}
	return u.Email
}

// initial is the letter shown in the avatar circle.
func initial(u User) string {
	for _, r := range displayName(u) {
		return strings.ToUpper(string(r))
	}
	return "?"
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// fieldID and errorID tie an input to its error message for aria-describedby.
func fieldID(form, field string) string { return form + "-" + strings.ReplaceAll(field, "_", "-") }

func errorID(form, field string) string { return fieldID(form, field) + "-error" }

// defaultRole returns role when it is one of roles, else "developer" when that
// is offered, else "" (no preselection). A fresh form thus never defaults to a
// privileged role.
func defaultRole(role string, roles []string) string {
	if slices.Contains(roles, role) {
		return role
	}
	if slices.Contains(roles, "developer") {
		return "developer"
	}
	return ""
}
