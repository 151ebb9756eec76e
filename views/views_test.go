package views

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	"golang.org/x/net/html"
)

func render(t *testing.T, c templ.Component) string {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("Render() error: %v", err)
	}
	return buf.String()
}

func parse(t *testing.T, out string) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(out))
	if err != nil {
		t.Fatalf("html.Parse() error: %v", err)
	}
	return doc
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// all returns every element below n for which match is true, in document order.
func all(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func tag(name string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Data == name }
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

func byID(doc *html.Node, id string) *html.Node {
	found := all(doc, func(n *html.Node) bool { v, _ := attr(n, "id"); return v == id })
	if len(found) == 0 {
		return nil
	}
	return found[0]
}

// testID matches the elements whose data-testid is id: the hooks tests
// find elements by, whatever their markup or wording.
func testID(id string) func(*html.Node) bool {
	return func(n *html.Node) bool { v, _ := attr(n, "data-testid"); return v == id }
}

// byTestID is the first element below n whose data-testid is id, or nil.
func byTestID(n *html.Node, id string) *html.Node {
	if found := all(n, testID(id)); len(found) > 0 {
		return found[0]
	}
	return nil
}

// textOf is the text of the first element below n whose data-testid is id;
// the test fails when there is none.
func textOf(t *testing.T, n *html.Node, id string) string {
	t.Helper()
	el := byTestID(n, id)
	if el == nil {
		t.Fatalf("Got(no [data-testid=%q]); want the element", id)
	}
	return text(el)
}

// hrefs is the set of link targets below n.
func hrefs(n *html.Node) map[string]bool {
	out := map[string]bool{}
	for _, a := range all(n, tag("a")) {
		if h, _ := attr(a, "href"); h != "" {
			out[h] = true
		}
	}
	return out
}

// withAttr matches elements whose attribute key is val.
func withAttr(key, val string) func(*html.Node) bool {
	return func(n *html.Node) bool { v, ok := attr(n, key); return ok && v == val }
}

// TestPagesRender renders every sample page and checks what every page must
// hold: its title, the CSRF field in each POST form, and nothing the CSP would
// block (inline scripts, style attributes or blocks, event handler attributes).
func TestPagesRender(t *testing.T) {
	for _, sp := range samplePages() {
		t.Run(sp.Name, func(t *testing.T) {
			out := render(t, sp.View)
			doc := parse(t, out)

			if got := text(doc); !strings.Contains(got, sp.Title) {
				t.Errorf("Got(page text) = %.200q…; want it to contain %q", got, sp.Title)
			}
			if strings.Contains(out, "<script>") {
				t.Errorf("Got(output) contains %q; want only <script src>", "<script>")
			}
			if strings.Contains(out, " style=") {
				t.Errorf("Got(output) contains %q; want no style attributes", " style=")
			}
			for _, n := range all(doc, func(*html.Node) bool { return true }) {
				for _, a := range n.Attr {
					if strings.HasPrefix(a.Key, "on") {
						t.Errorf("Got(<%s %s=%q>); want no event handler attributes", n.Data, a.Key, a.Val)
					}
					if a.Key == "style" {
						t.Errorf("Got(<%s style=%q>); want no style attributes", n.Data, a.Val)
					}
				}
				switch n.Data {
				case "style":
					t.Errorf("Got(<style> element); want none")
				case "script":
					if src, _ := attr(n, "src"); src == "" || n.FirstChild != nil {
						t.Errorf("Got(<script> without src or with a body); want only <script src>")
					}
				}
			}

			forms := all(doc, tag("form"))
			for _, f := range forms {
				method, _ := attr(f, "method")
				action, _ := attr(f, "action")
				if !strings.EqualFold(method, "post") {
					continue
				}
				csrf := all(f, func(n *html.Node) bool {
					name, _ := attr(n, "name")
					return n.Data == "input" && name == "_csrf"
				})
				if len(csrf) != 1 {
					t.Errorf("Got(%d _csrf inputs in POST form %q); want 1", len(csrf), action)
					continue
				}
				if v, _ := attr(csrf[0], "value"); v != sp.Page.CSRF || v == "" {
					t.Errorf("Got(_csrf value in form %q) = %q; want %q", action, v, sp.Page.CSRF)
				}
			}

			if mains := all(doc, tag("main")); len(mains) != 1 {
				t.Errorf("Got(%d <main> elements); want 1", len(mains))
			} else if id, _ := attr(mains[0], "id"); id != "main" {
				t.Errorf("Got(<main id>) = %q; want %q", id, "main")
			}
			if h1 := all(doc, tag("h1")); len(h1) != 1 {
				t.Errorf("Got(%d <h1> elements); want 1", len(h1))
			}

			// Every id is unique and every reference points at an element.
			seen := map[string]bool{}
			for _, n := range all(doc, func(n *html.Node) bool { _, ok := attr(n, "id"); return ok }) {
				id, _ := attr(n, "id")
				if seen[id] {
					t.Errorf("Got(duplicate id %q); want unique ids", id)
				}
				seen[id] = true
			}
			for _, n := range all(doc, func(*html.Node) bool { return true }) {
				for _, key := range []string{"for", "aria-describedby", "aria-labelledby"} {
					v, ok := attr(n, key)
					if !ok {
						continue
					}
					for _, id := range strings.Fields(v) {
						if !seen[id] {
							t.Errorf("Got(<%s %s=%q>) naming a missing id; want an existing element", n.Data, key, id)
						}
					}
				}
			}
		})
	}
}

func TestShell(t *testing.T) {
	base := samplePageModel("Audit log", NavAudit)
	notOperator := base
	notOperator.IsOperator = false
	notOperator.Nav.Operator = nil // handlers leave operator pages out for others
	prodIdP := base
	prodIdP.DevIdP = false
	noCSRF := base
	noCSRF.CSRF = ""
	tests := []struct {
		name         string
		page         Page
		wantCurrent  string // href of the aria-current item
		wantOperator bool
		wantBanner   bool
	}{
		{"operator in dev", base, "/audit", true, true},
		{"not operator", notOperator, "/audit", false, true},
		{"real identity provider", prodIdP, "/audit", true, false},
		{"members active", samplePageModel("Members", NavMembers), "/settings/members", true, true},
		{"without csrf", noCSRF, "/audit", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := render(t, Audit(tt.page, AuditView{}))
			doc := parse(t, out)

			current := all(doc, func(n *html.Node) bool { v, _ := attr(n, "aria-current"); return v == "page" })
			if len(current) != 1 {
				t.Fatalf("Got(%d aria-current elements); want 1", len(current))
			}
			if href, _ := attr(current[0], "href"); href != tt.wantCurrent {
				t.Errorf("Got(aria-current href) = %q; want %q", href, tt.wantCurrent)
			}
			op := all(doc, func(n *html.Node) bool { v, _ := attr(n, "href"); return v == "/operator/tenants" })
			if got := len(op) > 0; got != tt.wantOperator {
				t.Errorf("Got(operator link shown) = %v; want %v", got, tt.wantOperator)
			}
			if got := strings.Contains(text(doc), "Development identity provider"); got != tt.wantBanner {
				t.Errorf("Got(dev banner shown) = %v; want %v", got, tt.wantBanner)
			}
			body := all(doc, tag("body"))[0]
			hx, ok := attr(body, "hx-headers")
			if tt.page.CSRF == "" {
				if ok {
					t.Errorf("Got(<body hx-headers=%q>) without a token; want no attribute", hx)
				}
			} else if want := `{"X-CSRF-Token":"` + tt.page.CSRF + `"}`; hx != want {
				t.Errorf("Got(<body hx-headers>) = %q; want %q", hx, want)
			}
			if !strings.Contains(out, `href="#main"`) {
				t.Errorf("Got(no skip link to #main); want one")
			}
			cfg := all(doc, func(n *html.Node) bool { v, _ := attr(n, "name"); return n.Data == "meta" && v == "htmx-config" })
			if len(cfg) != 1 {
				t.Fatalf("Got(%d htmx-config metas); want 1", len(cfg))
			}
			if v, _ := attr(cfg[0], "content"); !strings.Contains(v, `"includeIndicatorStyles":false`) || !strings.Contains(v, `"allowEval":false`) {
				t.Errorf("Got(htmx-config) = %q; want indicator styles and eval off", v)
			}
			for _, s := range all(doc, tag("script")) {
				if src, _ := attr(s, "src"); !strings.HasSuffix(src, "?v="+tt.page.AssetVersion) {
					t.Errorf("Got(script src) = %q; want the ?v=%s cache buster", src, tt.page.AssetVersion)
				}
			}
		})
	}
}

func TestTimesShownInUTC(t *testing.T) {
	p := samplePageModel("Audit log", NavAudit)
	row := sampleAudit()[0]
	row.Time = row.Time.In(time.FixedZone("UTC-5", -5*3600)) // same instant, other zone
	doc := parse(t, render(t, Audit(p, AuditView{Rows: []AuditRow{row}})))
	times := all(doc, tag("time"))
	if len(times) != 1 {
		t.Fatalf("Got(%d <time> elements); want 1", len(times))
	}
	if got, want := text(times[0]), "2026-11-30 06:12 UTC"; got != want {
		t.Errorf("Got(<time> text) = %q; want %q", got, want)
	}
	if got, _ := attr(times[0], "datetime"); got != "2026-11-30T06:12:44Z" {
		t.Errorf("Got(<time datetime>) = %q; want %q", got, "2026-11-30T06:12:44Z")
	}
}

func TestFieldErrors(t *testing.T) {
	p := samplePageModel("Members", NavMembers)
	v := MembersView{CanEdit: true, Roles: []string{"admin", "developer"}, Form: InviteForm{
		Email: "nope", Errors: map[string]string{"email": "Enter an email address.", FormError: "Nothing was sent."}}}
	doc := parse(t, render(t, Members(p, v)))

	email := byID(doc, "invite-email")
	if email == nil {
		t.Fatal("Got(no #invite-email); want the email input")
	}
	if got, _ := attr(email, "aria-invalid"); got != "true" {
		t.Errorf("Got(email aria-invalid) = %q; want %q", got, "true")
	}
	if got, _ := attr(email, "value"); got != "nope" {
		t.Errorf("Got(email value) = %q; want the submitted %q", got, "nope")
	}
	desc, _ := attr(email, "aria-describedby")
	msg := byID(doc, desc)
	if msg == nil || text(msg) != "Enter an email address." {
		t.Errorf("Got(aria-describedby %q target) = %v; want the field's error message", desc, msg)
	}
	role := byID(doc, "invite-role")
	if role == nil {
		t.Fatal("Got(no #invite-role); want the role select")
	}
	if _, ok := attr(role, "aria-invalid"); ok {
		t.Errorf("Got(role aria-invalid) set; want it only on fields with errors")
	}
	if !strings.Contains(text(doc), "Nothing was sent.") {
		t.Errorf("Got(no form-level error); want %q shown", "Nothing was sent.")
	}
}

func TestEditControlsFollowCanEdit(t *testing.T) {
	p := samplePageModel("Members", NavMembers)
	rows := []MemberRow{{ID: "m9", Email: "x@acme.test", Role: "developer", Active: true}}
	tokens := []TokenRow{{ID: "t9", Name: "bot", Prefix: "stk_a", Role: "developer", CanRevoke: true}}
	tests := []struct {
		name      string
		view      templ.Component
		wantPosts []string
	}{
		{"members admin", Members(p, MembersView{Rows: rows, CanEdit: true, Roles: []string{"developer"}}),
			[]string{"/logout", "/settings/members", "/settings/members/m9/remove", "/settings/members/m9/role", "/tenant/switch"}},
		{"members read-only", Members(p, MembersView{Rows: rows}), []string{"/logout", "/tenant/switch"}},
		{"tokens admin", Tokens(p, TokensView{Rows: tokens, CanEdit: true}),
			[]string{"/logout", "/settings/tokens", "/settings/tokens/t9/revoke", "/tenant/switch"}},
		{"tokens read-only", Tokens(p, TokensView{Rows: tokens}), []string{"/logout", "/tenant/switch"}},
		{"revoked token has no revoke", Tokens(p, TokensView{Rows: []TokenRow{{ID: "t8", Name: "old", Revoked: true}}, CanEdit: true}),
			[]string{"/logout", "/settings/tokens", "/tenant/switch"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := parse(t, render(t, tt.view))
			var got []string
			for _, f := range all(doc, tag("form")) {
				if m, _ := attr(f, "method"); m == "post" {
					a, _ := attr(f, "action")
					got = append(got, a)
				}
			}
			slices.Sort(got)
			if strings.Join(got, " ") != strings.Join(tt.wantPosts, " ") {
				t.Errorf("Got(POST actions) = %v; want %v", got, tt.wantPosts)
			}
			for _, f := range all(doc, tag("form")) {
				a, _ := attr(f, "action")
				if strings.HasSuffix(a, "/remove") || strings.HasSuffix(a, "/revoke") {
					if c, _ := attr(f, "data-confirm"); c == "" {
						t.Errorf("Got(form %q without data-confirm); want a confirmation", a)
					}
				}
			}
		})
	}
}

func TestNewSecretShownOnce(t *testing.T) {
	p := samplePageModel("API tokens", NavTokens)
	const secret = "stk_abc.secretvalue"
	tests := []struct {
		name      string
		v         TokensView
		wantCount int
	}{
		{"just created", TokensView{NewSecret: secret, NewSecretName: "ci"}, 1},
		{"later visit", TokensView{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := render(t, Tokens(p, tt.v))
			if got := strings.Count(out, secret); got != tt.wantCount {
				t.Errorf("Got(secret occurrences) = %d; want %d", got, tt.wantCount)
			}
			if got := strings.Contains(out, "You will not see it again."); got != (tt.wantCount == 1) {
				t.Errorf("Got(warning shown) = %v; want %v", got, tt.wantCount == 1)
			}
			if tt.wantCount == 1 {
				doc := parse(t, out)
				btn := all(doc, func(n *html.Node) bool { v, _ := attr(n, "data-copy"); return v == "new-secret" })
				if len(btn) != 1 || byID(doc, "new-secret") == nil {
					t.Errorf("Got(%d copy buttons, #new-secret present=%v); want 1 and true", len(btn), byID(doc, "new-secret") != nil)
				}
			}
		})
	}
}

func TestUserTextIsEscaped(t *testing.T) {
	const evil = `<script>alert("x")</script><img src=x onerror=alert(1)>`
	p := samplePageModel("Members", NavMembers)
	p.User.Name = evil
	p.Flash = []Flash{{Kind: FlashInfo, Text: evil}}
	out := render(t, Members(p, MembersView{Rows: []MemberRow{{ID: `"><x`, Email: evil, Name: evil, Role: evil}}, CanEdit: true, Roles: []string{evil}}))
	if strings.Contains(out, "<script>") || strings.Contains(out, "<img src=x") {
		t.Errorf("Got(unescaped user text in output); want it escaped")
	}
	doc := parse(t, out)
	if n := len(all(doc, tag("img"))); n != 1 { // only the header logo
		t.Errorf("Got(%d <img> elements); want 1", n)
	}
}

func TestLoginPage(t *testing.T) {
	tests := []struct {
		name       string
		v          LoginView
		wantButton string
		wantReturn string
		wantBanner bool
	}{
		{"dev", LoginView{ProviderName: "Dev IdP", DevIdP: true, ReturnTo: "/audit?x=1"}, "Sign in with Dev IdP", "/audit?x=1", true},
		{"oidc", LoginView{ProviderName: "Okta"}, "Sign in with Okta", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := parse(t, render(t, LoginPage(Page{Title: "Sign in"}, tt.v)))
			forms := all(doc, tag("form"))
			if len(forms) != 1 {
				t.Fatalf("Got(%d forms); want 1", len(forms))
			}
			if m, _ := attr(forms[0], "method"); m != "get" {
				t.Errorf("Got(form method) = %q; want %q", m, "get")
			}
			if a, _ := attr(forms[0], "action"); a != "/login/start" {
				t.Errorf("Got(form action) = %q; want %q", a, "/login/start")
			}
			if got := text(forms[0]); got != tt.wantButton {
				t.Errorf("Got(button text) = %q; want %q", got, tt.wantButton)
			}
			ret := all(forms[0], func(n *html.Node) bool { v, _ := attr(n, "name"); return v == "return_to" })
			got := ""
			if len(ret) == 1 {
				got, _ = attr(ret[0], "value")
			}
			if got != tt.wantReturn {
				t.Errorf("Got(return_to) = %q; want %q", got, tt.wantReturn)
			}
			if got := strings.Contains(text(doc), "Development identity provider"); got != tt.wantBanner {
				t.Errorf("Got(dev banner) = %v; want %v", got, tt.wantBanner)
			}
		})
	}
}

func TestRoleSelectNeverDefaultsToPrivileged(t *testing.T) {
	p := samplePageModel("Members", NavMembers)
	tests := []struct {
		name      string
		roles     []string
		submitted string
		want      string // value of the selected option
	}{
		{"fresh form picks developer", []string{"admin", "manager", "developer"}, "", "developer"},
		{"submitted role kept", []string{"admin", "developer", "auditor"}, "auditor", "auditor"},
		{"unknown role not kept", []string{"admin", "developer"}, "root", "developer"},
		{"no developer role asks", []string{"admin", "auditor"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := parse(t, render(t, Members(p, MembersView{CanEdit: true, Roles: tt.roles, Form: InviteForm{Role: tt.submitted}})))
			sel := byID(doc, "invite-role")
			if sel == nil {
				t.Fatal("Got(no #invite-role); want the role select")
			}
			selected := all(sel, func(n *html.Node) bool { _, ok := attr(n, "selected"); return n.Data == "option" && ok })
			if len(selected) != 1 {
				t.Fatalf("Got(%d selected options); want exactly 1", len(selected))
			}
			if got, _ := attr(selected[0], "value"); got != tt.want {
				t.Errorf("Got(selected role) = %q; want %q", got, tt.want)
			}
		})
	}
}
