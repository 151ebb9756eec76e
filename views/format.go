package views

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
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

// ShortID is the short form of an id that every list shows: its last 12
// characters (a UUIDv7's random tail; the head is a timestamp that many
// ids share).
func ShortID(id string) string { return termShort(id) }

// AuditPair is one key/value of an audit event's details, as shown.
type AuditPair struct{ Key, Value string }

// DetailPairs turns an event's details into readable pairs, by key:
// strings as they are (times as every page shows them), lists of plain
// values joined with commas, anything nested as compact JSON; empty
// values are left out.
func DetailPairs(details map[string]any) []AuditPair {
	keys := slices.Sorted(maps.Keys(details))
	out := make([]AuditPair, 0, len(keys))
	for _, k := range keys {
		if v := detailValue(details[k]); v != "—" {
			out = append(out, AuditPair{Key: strings.ReplaceAll(k, "_", " "), Value: v})
		}
	}
	return out
}

func detailValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "—"
	case string:
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			return showTime(t)
		}
		return orDash(x)
	case bool:
		if x {
			return "yes"
		}
		return "no"
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			switch e.(type) {
			case map[string]any, []any:
				b, _ := json.Marshal(x)
				return string(b)
			}
			parts = append(parts, detailValue(e))
		}
		if len(parts) == 0 {
			return "—"
		}
		return strings.Join(parts, ", ")
	case []string:
		if len(x) == 0 {
			return "—"
		}
		return strings.Join(x, ", ")
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return fmt.Sprint(x)
		}
		return string(b)
	}
}

// isoDate makes a text input take a date as YYYY-MM-DD, the form every
// page shows dates in (a native date input shows the browser's locale,
// 12/01/2026 in en-US); the server reads the same value either way.
func isoDate() templ.Attributes {
	return templ.Attributes{"pattern": `\d{4}-\d{2}-\d{2}`, "inputmode": "numeric", "maxlength": "10", "size": "10",
		"title": "A date as YYYY-MM-DD", "autocomplete": "off", "data-autosubmit-ignore": true}
}
