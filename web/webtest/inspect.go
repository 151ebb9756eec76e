package webtest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TenantNamed creates a tenant with a display name.
func (e *Env) TenantNamed(t testing.TB, slug, name string) tenants.Tenant {
	t.Helper()
	tn, err := e.Store.CreateTenant(context.Background(), system, slug, name)
	if err != nil {
		t.Fatalf("CreateTenant(%s): %v", slug, err)
	}
	return tn
}

// Invite invites email into tn with role and returns the membership.
func (e *Env) Invite(t testing.TB, tn tenants.Tenant, email string, role tenants.Role) tenants.Membership {
	t.Helper()
	m, err := e.Store.InviteMember(context.Background(), system, tn.ID, email, role)
	if err != nil {
		t.Fatalf("InviteMember(%s, %s): %v", tn.Slug, email, err)
	}
	return m
}

// NewToken makes an API token of tn and returns its secret and record.
func (e *Env) NewToken(t testing.TB, tn tenants.Tenant, name string, role tenants.Role) (string, tenants.APIToken) {
	t.Helper()
	secret, tok, err := e.Store.CreateToken(context.Background(), system, tn.ID, tenants.NewToken{Name: name, Role: role})
	if err != nil {
		t.Fatalf("CreateToken(%s, %s): %v", tn.Slug, name, err)
	}
	return secret, tok
}

// Counts returns the number of rows of every application table.
func (e *Env) Counts(t testing.TB) map[string]int64 {
	t.Helper()
	return dbtest.Count(t, e.DB)
}

// Settled waits until the app's background work is done: no workflow run
// executing and no table's row count moving. Call it before Counts when an
// earlier request started work that ends on its own (a run ending writes
// its outbox rows whenever it ends).
func (e *Env) Settled(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	prev := e.Counts(t)
	for {
		time.Sleep(50 * time.Millisecond)
		cur := e.Counts(t)
		n := e.Runs.Executing()
		if same, _ := dbtest.Equal(prev, cur); same && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("background work did not settle in a minute: %d runs executing", n)
		}
		prev = cur
	}
}

// Unchanged fails the test when any table's row count differs from before.
func (e *Env) Unchanged(t testing.TB, before map[string]int64) {
	t.Helper()
	if ok, diff := dbtest.Equal(before, e.Counts(t)); !ok {
		t.Errorf("rows written by a rejected request: %s; want none", diff)
	}
}

// Events returns the audit events of type typ in every tenant, oldest first.
func (e *Env) Events(t testing.TB, typ string) []audit.Event {
	t.Helper()
	var out []audit.Event
	if err := e.DB.Where("type = ?", typ).Order("occurred_at, id").Find(&out).Error; err != nil {
		t.Fatalf("read audit events %s: %v", typ, err)
	}
	return out
}

// Membership reads one membership row, for checking that it is unchanged.
func (e *Env) Membership(t testing.TB, id string) tenants.Membership {
	t.Helper()
	var m tenants.Membership
	if err := e.DB.Take(&m, "id = ?", id).Error; err != nil {
		t.Fatalf("read membership %s: %v", id, err)
	}
	return m
}

// APIToken reads one token row, for checking that it is unchanged.
func (e *Env) APIToken(t testing.TB, id string) tenants.APIToken {
	t.Helper()
	var k tenants.APIToken
	if err := e.DB.Take(&k, "id = ?", id).Error; err != nil {
		t.Fatalf("read token %s: %v", id, err)
	}
	return k
}

// Cookie returns the value of the named cookie the client holds for the
// app, or "".
func (c *Client) Cookie(name string) string {
	u, _ := url.Parse(c.Base)
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

// SetCookie plants a cookie for the app's origin, as an attacker or an old
// browser tab would.
func (c *Client) SetCookie(name, value string) {
	u, _ := url.Parse(c.Base)
	c.Jar.SetCookies(u, []*http.Cookie{{Name: name, Value: value, Path: "/"}})
}

// SessionCookieName is the session cookie of the test server (plain http).
const SessionCookieName = "stockade_session"

// CSRFCookieName is the CSRF cookie of the test server (plain http).
const CSRFCookieName = "stockade_csrf"

// Session returns the client's session cookie value, or "".
func (c *Client) Session() string { return c.Cookie(SessionCookieName) }

// Problem decodes a problem document; it fails the test when body is not one.
func Problem(t testing.TB, hdr http.Header, body string) errdefs.Problem {
	t.Helper()
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("Got(Content-Type) = %q; want application/problem+json (body %.300s)", ct, body)
	}
	var p errdefs.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("decode problem: %v: %.300s", err, body)
	}
	return p
}

// Doc is a parsed HTML page.
type Doc struct{ root *html.Node }

// ParseHTML parses a page; it fails the test when body is not HTML.
func ParseHTML(t testing.TB, body string) Doc {
	t.Helper()
	n, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse HTML: %v", err)
	}
	return Doc{n}
}

func attr(n *html.Node, k string) string {
	for _, a := range n.Attr {
		if a.Key == k {
			return a.Val
		}
	}
	return ""
}

func (d Doc) find(match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(d.root)
	return out
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// Text returns the whitespace-normalised text of the elements with tag
// name tag, in document order.
func (d Doc) Text(tag string) []string {
	var out []string
	for _, n := range d.find(func(n *html.Node) bool { return n.Data == tag }) {
		out = append(out, text(n))
	}
	return out
}

// FieldError returns the error message shown next to the form control
// named name: the control must be marked aria-invalid and point with
// aria-describedby at an element of class field-error holding the message.
func (d Doc) FieldError(name string) (string, bool) {
	ctrls := d.find(func(n *html.Node) bool {
		return (n.Data == "input" || n.Data == "select" || n.Data == "textarea") && attr(n, "name") == name
	})
	for _, c := range ctrls {
		if attr(c, "aria-invalid") != "true" {
			continue
		}
		for _, id := range strings.Fields(attr(c, "aria-describedby")) {
			for _, n := range d.find(func(n *html.Node) bool { return attr(n, "id") == id }) {
				if strings.Contains(" "+attr(n, "class")+" ", " field-error ") {
					return text(n), true
				}
			}
		}
	}
	return "", false
}

// IDs returns the id attributes that start with prefix, in document order.
func (d Doc) IDs(prefix string) []string {
	var out []string
	for _, n := range d.find(func(n *html.Node) bool { return strings.HasPrefix(attr(n, "id"), prefix) }) {
		out = append(out, attr(n, "id"))
	}
	return out
}

// Actions returns what the page offers to change: the action of every
// form posted with a method other than GET that has a submit button, and
// every hx-post, hx-put, hx-patch and hx-delete target, in document order.
// A form shown read-only (no submit button) offers nothing.
func (d Doc) Actions() []string {
	var out []string
	for _, n := range d.find(func(*html.Node) bool { return true }) {
		if n.Data == "form" && attr(n, "method") != "" && !strings.EqualFold(attr(n, "method"), "get") && hasSubmit(n) {
			out = append(out, attr(n, "action"))
		}
		for _, k := range []string{"hx-post", "hx-put", "hx-patch", "hx-delete"} {
			if v := attr(n, k); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// hasSubmit reports whether form holds a control that submits it.
func hasSubmit(form *html.Node) bool {
	return len(Doc{form}.find(func(n *html.Node) bool {
		typ := strings.ToLower(attr(n, "type"))
		return (n.Data == "button" && typ != "button" && typ != "reset") || (n.Data == "input" && (typ == "submit" || typ == "image"))
	})) > 0
}
