package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/stockade-dev/stockade/cmd/stockade/app"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/authn"
	"github.com/stockade-dev/stockade/web/devidp"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestSecurityHeaders checks the headers of pages, API answers, errors and
// static files, and that no page carries inline script or style that the
// CSP would have to allow.
func TestSecurityHeaders(t *testing.T) {
	env := webtest.New(t, webtest.Options{Operators: []string{"admin@acme-corp.test"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "admin@acme-corp.test", tenants.RoleAdmin)
	admin := env.Login(t, "admin@acme-corp.test")
	anon := env.Anonymous()

	type target struct {
		client *webtest.Client
		path   string
		page   bool
	}
	targets := []target{
		{anon, "/login", true},
		{admin, "/no/such/page", true},
		{admin, "/api/v1/me", false},
		{anon, "/api/v1/me", false},
		{anon, "/healthz", false},
		{anon, "/static/css/app.css", false},
	}
	// Every page of the route table, as someone who may see them all.
	for _, r := range env.App.RouteTable() {
		if r.Method == http.MethodGet && !r.API && !strings.Contains(r.Path, ":") && r.Path != "/login/start" {
			targets = append(targets, target{admin, r.Path, true})
		}
	}
	for _, tg := range targets {
		t.Run(tg.path, func(t *testing.T) {
			status, body, h := tg.client.Request(t, http.MethodGet, tg.path, "", nil)
			if status >= 500 {
				t.Fatalf("Got(status) = %d; want no server error", status)
			}
			csp := h.Get("Content-Security-Policy")
			for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "object-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("Got(CSP) = %q; want it to contain %q", csp, want)
				}
			}
			for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*"} {
				if strings.Contains(csp, bad) {
					t.Errorf("Got(CSP) = %q; want no %q", csp, bad)
				}
			}
			for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"} {
				if got := h.Get(k); got != want {
					t.Errorf("Got(%s) = %q; want %q", k, got, want)
				}
			}
			if hsts := h.Get("Strict-Transport-Security"); hsts != "" {
				t.Errorf("Got(HSTS over plain http) = %q; want none", hsts)
			}
			if tg.page && status == http.StatusOK {
				if cc := h.Get("Cache-Control"); cc != "no-store" {
					t.Errorf("Got(Cache-Control) = %q; want no-store", cc)
				}
				for _, problem := range inlineCode(t, body) {
					t.Errorf("Got(page) has %s; want none (the CSP blocks it)", problem)
				}
			}
		})
	}
}

// inlineCode lists inline scripts, style elements and attributes, event
// handler attributes and javascript: URLs in a page.
func inlineCode(t *testing.T, body string) []string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse page: %v", err)
	}
	var out []string
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			hasSrc := false
			for _, a := range n.Attr {
				k := strings.ToLower(a.Key)
				switch {
				case k == "src":
					hasSrc = true
				case k == "style":
					out = append(out, "a style attribute on <"+n.Data+">")
				case strings.HasPrefix(k, "on"):
					out = append(out, "an "+k+" handler on <"+n.Data+">")
				case (k == "href" || k == "action" || k == "formaction") && strings.HasPrefix(strings.ToLower(strings.TrimSpace(a.Val)), "javascript:"):
					out = append(out, "a javascript: URL on <"+n.Data+">")
				case k == "hx-on" || strings.HasPrefix(k, "hx-on:") || strings.HasPrefix(k, "hx-on-"):
					out = append(out, "an htmx inline handler "+k)
				}
			}
			if n.Data == "script" && !hasSrc {
				out = append(out, "an inline <script>")
			}
			if n.Data == "style" {
				out = append(out, "a <style> element")
			}
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(doc)
	return out
}

// TestSessionCookie checks the cookie a login sets over plain http.
func TestSessionCookie(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "")
	env.Member(t, acme, "dev@acme.test", tenants.RoleDeveloper)
	c := env.Anonymous()
	cb, err := c.CallbackURL("dev@acme.test")
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := visit(t, c, cb)
	ck := findCookie(resp, webtest.SessionCookieName)
	if ck == nil {
		t.Fatalf("Got(Set-Cookie) = %q; want %s", resp.Header.Values("Set-Cookie"), webtest.SessionCookieName)
	}
	if !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/" || ck.Secure || ck.Domain != "" {
		t.Errorf("Got(session cookie) = %s; want HttpOnly, SameSite=Lax, Path=/, host-only, not Secure over http", ck)
	}
	if len(ck.Value) < 40 {
		t.Errorf("Got(session secret length) = %d; want at least 40 characters (32 random bytes)", len(ck.Value))
	}
}

func findCookie(resp *http.Response, name string) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}

// TestSecureCookiesUnderHTTPS serves the app over TLS with an https public
// URL and a separate identity provider as its real issuer: cookies are
// Secure, the session cookie is __Host- prefixed, and HSTS is on.
func TestSecureCookiesUnderHTTPS(t *testing.T) {
	idpSrv := httptest.NewUnstartedServer(nil)
	appSrv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + idpSrv.Listener.Addr().String() + "/idp"
	publicURL := "https://" + appSrv.Listener.Addr().String()
	idp, err := devidp.New(devidp.Config{Issuer: issuer, Clients: []devidp.Client{{
		ID: "stockade-tls", Secret: "tls-client-secret", RedirectURIs: []string{publicURL + "/auth/callback"}}}})
	if err != nil {
		t.Fatal(err)
	}
	idpSrv.Config.Handler = idp.Handler()
	idpSrv.Start()
	t.Cleanup(idpSrv.Close)

	db := dbtest.SQLite(t)
	store := tenants.NewStore(db, nil)
	acme, err := store.CreateTenant(t.Context(), audit.Actor{Kind: "system", ID: "test"}, "acme-corp", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.InviteMember(t.Context(), audit.Actor{Kind: "system", ID: "test"}, acme.ID, "dev@acme.test", tenants.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(t.Context(), app.Config{
		PublicURL: publicURL, DataDir: t.TempDir(), RootKey: []byte("0123456789abcdef0123456789abcdef"),
		OIDCIssuer: issuer, OIDCClientID: "stockade-tls", OIDCClientSecret: "tls-client-secret",
	}, app.Options{DB: db, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("app.New with a real issuer: %v", err)
	}
	t.Cleanup(a.Close)
	appSrv.Config.Handler = a.Handler()
	appSrv.StartTLS()
	t.Cleanup(appSrv.Close)

	jar, _ := cookiejar.New(nil)
	c := &webtest.Client{Base: publicURL, Client: &http.Client{Jar: jar, Transport: appSrv.Client().Transport, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}

	start, _ := visit(t, c, publicURL+"/login/start")
	if flow := findCookie(start, "stockade_login"); flow == nil || !flow.Secure || !flow.HttpOnly {
		t.Errorf("Got(login flow cookie) = %v; want Secure and HttpOnly", flow)
	}
	if hsts := start.Header.Get("Strict-Transport-Security"); !strings.Contains(hsts, "max-age=") {
		t.Errorf("Got(HSTS) = %q; want max-age", hsts)
	}
	if _, page := visit(t, c, publicURL+"/login"); page == "" {
		t.Fatal("Got(/login) = empty")
	}
	// The CSRF cookie is pinned to this origin like the session's: no
	// sibling subdomain or plain-http page can plant one.
	// (The first page served, /login/start, issued it.)
	if csrf := findCookie(start, "__Host-"+webtest.CSRFCookieName); csrf == nil || !csrf.Secure || !csrf.HttpOnly ||
		csrf.Path != "/" || csrf.Domain != "" || csrf.SameSite != http.SameSiteStrictMode {
		t.Errorf("Got(CSRF cookie) = %v (Set-Cookie %q); want __Host-%s, Secure, HttpOnly, SameSite=Strict, Path=/, no Domain",
			csrf, start.Header.Values("Set-Cookie"), webtest.CSRFCookieName)
	}
	if findCookie(start, webtest.CSRFCookieName) != nil {
		t.Errorf("Got(Set-Cookie) includes the plain %s; want only the __Host- cookie", webtest.CSRFCookieName)
	}

	cb, err := c.CallbackURL("dev@acme.test")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cb, publicURL+"/auth/callback?") {
		t.Fatalf("Got(callback) = %q; want %s/auth/callback", cb, publicURL)
	}
	resp, body := visit(t, c, cb)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("Got(callback) = %d; want 303: %.300s", resp.StatusCode, body)
	}
	ck := findCookie(resp, "__Host-stockade_session")
	if ck == nil {
		t.Fatalf("Got(Set-Cookie) = %q; want __Host-stockade_session", resp.Header.Values("Set-Cookie"))
	}
	if !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/" || ck.Domain != "" {
		t.Errorf("Got(session cookie) = %s; want Secure, HttpOnly, SameSite=Lax, Path=/, no Domain", ck)
	}
	if findCookie(resp, webtest.SessionCookieName) != nil {
		t.Errorf("Got(Set-Cookie) includes the plain %s; want only the __Host- cookie", webtest.SessionCookieName)
	}
	if s, m := me(t, c); s != http.StatusOK || m.User == nil || m.User.Email != "dev@acme.test" || deref(m.Tenant) != "acme-corp" {
		t.Errorf("Got(/api/v1/me over https) = %d %+v; want dev@acme.test in acme-corp", s, m)
	}
	// A state change with the page's token works over https.
	if s, body, _ := c.Post(t, "/settings/members", url.Values{"email": {"new@acme.test"}, "role": {"developer"}}); s >= 400 {
		t.Errorf("Got(invite over https with the page's CSRF token) = %d %.300s; want success", s, body)
	}
}

func findCookieIn(c *webtest.Client, base, name string) string {
	u, _ := url.Parse(base)
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

// TestIssuerUnreachable: a misconfigured issuer stops startup with a
// message naming it.
func TestIssuerUnreachable(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	issuer := dead.URL + "/realms/none"
	dead.Close()
	db := dbtest.SQLite(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := app.New(ctx, app.Config{PublicURL: "http://127.0.0.1:8080", DataDir: t.TempDir(), RootKey: []byte("0123456789abcdef0123456789abcdef"),
		OIDCIssuer: issuer, OIDCClientID: "x", OIDCClientSecret: "y"}, app.Options{DB: db, Log: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, authn.ErrDiscovery) || !strings.Contains(err.Error(), issuer) {
		t.Errorf("Got(app.New with a dead issuer) = %v; want ErrDiscovery naming %s", err, issuer)
	}
}

// TestHealth: /healthz says alive; /readyz says whether the database
// answers.
func TestHealth(t *testing.T) {
	db := dbtest.SQLite(t)
	env := webtest.New(t, webtest.Options{DB: db})
	c := env.Anonymous()
	for _, tc := range []struct{ path, status string }{{"/healthz", "ok"}, {"/readyz", "ready"}} {
		var out struct{ Status string }
		if s, body := c.JSON(t, http.MethodGet, tc.path, nil, &out); s != http.StatusOK || out.Status != tc.status {
			t.Errorf("Got(GET %s) = %d %s; want 200 %s", tc.path, s, body, tc.status)
		}
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlDB.Close(); err != nil {
		t.Fatal(err)
	}
	var out struct{ Status, Error string }
	if s, body := c.JSON(t, http.MethodGet, "/readyz", nil, &out); s != http.StatusServiceUnavailable || out.Status != "unavailable" || out.Error == "" {
		t.Errorf("Got(GET /readyz with the database closed) = %d %s; want 503 unavailable with the reason", s, body)
	}
	if s, _ := c.JSON(t, http.MethodGet, "/healthz", nil, nil); s != http.StatusOK {
		t.Errorf("Got(GET /healthz with the database closed) = %d; want 200 (the process lives)", s)
	}
}

// TestMetrics: requests are counted by route template, never by raw path.
func TestMetrics(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "")
	env.Member(t, acme, "admin@acme-corp.test", tenants.RoleAdmin)
	admin := env.Login(t, "admin@acme-corp.test")
	token := env.WithToken(env.Token(t, acme, tenants.RoleAdmin))
	_, tok := env.NewToken(t, acme, "doomed", tenants.RoleDeveloper)
	m := env.Invite(t, acme, "member@acme-corp.test", tenants.RoleDeveloper)

	if s, _, _ := token.Request(t, http.MethodDelete, "/api/v1/tokens/"+tok.ID, "", nil); s != http.StatusNoContent {
		t.Fatalf("Got(DELETE token) = %d; want 204", s)
	}
	if s, _, _ := admin.Post(t, "/settings/members/"+m.ID+"/role", map[string][]string{"role": {"auditor"}}); s != http.StatusSeeOther {
		t.Fatalf("Got(POST role) = %d; want 303", s)
	}
	const probe = "unmatched-path-c0ffee42"
	admin.GetPage(t, "/"+probe+"/x")
	admin.GetPage(t, "/static/css/app.css?v="+probe)

	status, body := env.Anonymous().GetPage(t, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("Got(GET /metrics) = %d; want 200", status)
	}
	for _, raw := range []string{tok.ID, m.ID, probe} {
		if strings.Contains(body, raw) {
			t.Errorf("Got(metrics) contain %q; want route templates only", raw)
		}
	}
	// "/*" is the not-found route echo adds for the middleware group: still
	// one template for every unknown path.
	known := map[string]bool{"/static/*": true, web.DevIdPPath + "/*": true, "/metrics": true, "/*": true}
	for _, r := range env.App.RouteTable() {
		known[r.Path] = true
	}
	re := regexp.MustCompile(`^stockade_http_requests_total\{(.*)\} (\d+)`)
	routeRE := regexp.MustCompile(`route="([^"]*)"`)
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		mm := re.FindStringSubmatch(sc.Text())
		if mm == nil {
			continue
		}
		rm := routeRE.FindStringSubmatch(mm[1])
		if rm == nil {
			t.Errorf("Got(series) = %s; want a route label", sc.Text())
			continue
		}
		seen[sc.Text()] = true
		if !known[rm[1]] && rm[1] != "unmatched" {
			t.Errorf("Got(route label) = %q; want a route template", rm[1])
		}
	}
	for _, want := range []string{`code="204",method="DELETE",route="/api/v1/tokens/:id"`, `code="303",method="POST",route="/settings/members/:id/role"`} {
		found := false
		for line := range seen {
			found = found || strings.Contains(line, want)
		}
		if !found {
			t.Errorf("Got(metrics) lack a series with %s; want it counted", want)
		}
	}
}

// TestRequestID: every answer names its request, and problems repeat it.
func TestRequestID(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	c := env.Anonymous()
	ids := map[string]string{}
	for _, path := range []string{"/login", "/healthz", "/api/v1/me", "/no/such/page", "/static/css/app.css"} {
		_, body, h := c.Request(t, http.MethodGet, path, "", nil)
		id := h.Get("X-Request-Id")
		if len(id) < 16 {
			t.Errorf("Got(X-Request-Id of %s) = %q; want a request id", path, id)
		}
		if other, dup := ids[id]; dup {
			t.Errorf("Got(X-Request-Id of %s) = %q, same as %s; want unique", path, id, other)
		}
		ids[id] = path
		if path == "/api/v1/me" {
			if p := webtest.Problem(t, h, body); p.RequestID != id {
				t.Errorf("Got(problem request_id) = %q; want %q", p.RequestID, id)
			}
		}
	}
}

// TestMe: GET /api/v1/me for a person and for a token.
func TestMe(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "")
	env.Member(t, acme, "mgr@acme-corp.test", tenants.RoleManager)
	user := env.Login(t, "mgr@acme-corp.test")
	secret, tok := env.NewToken(t, acme, "ci-runner", tenants.RoleBilling)

	s, m := me(t, user)
	if s != http.StatusOK || m.Kind != "user" || m.User == nil || m.User.Email != "mgr@acme-corp.test" || m.Token != nil ||
		deref(m.Tenant) != "acme-corp" || deref(m.Role) != "manager" {
		t.Errorf("Got(/api/v1/me as a user) = %d %+v; want user mgr@acme-corp.test, manager of acme-corp", s, m)
	}
	s, m = me(t, env.WithToken(secret))
	if s != http.StatusOK || m.Kind != "token" || m.Token == nil || m.Token.ID != tok.ID || m.Token.Prefix != tok.Prefix ||
		m.Token.Name != "ci-runner" || m.User != nil || deref(m.Tenant) != "acme-corp" || deref(m.Role) != "billing" {
		t.Errorf("Got(/api/v1/me as a token) = %d %+v; want token ci-runner, billing of acme-corp", s, m)
	}
	for _, bad := range []string{"stk_bogus", secret + "x", "Basic " + secret} {
		c := env.WithToken(bad)
		if s, _ := me(t, c); s != http.StatusUnauthorized {
			t.Errorf("Got(/api/v1/me with token %.12q…) = %d; want 401", bad, s)
		}
	}
	if err := env.Store.RevokeToken(t.Context(), audit.Actor{Kind: "system", ID: "test"}, acme.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	if s, _ := me(t, env.WithToken(secret)); s != http.StatusUnauthorized {
		t.Errorf("Got(/api/v1/me with a revoked token) = %d; want 401", s)
	}
}

// TestAuditExportJSONL: the export streams one JSON event per line and is
// itself audited.
func TestAuditExportJSONL(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "")
	env.Member(t, acme, "auditor@acme-corp.test", tenants.RoleAuditor)
	env.Login(t, "auditor@acme-corp.test")
	secret, tok := env.NewToken(t, acme, "export-bot", tenants.RoleAuditor)
	c := env.WithToken(secret)
	exports := len(env.Events(t, audit.TypeAuditExported))

	req, _ := http.NewRequest(http.MethodGet, env.URL+"/api/v1/audit?format=jsonl", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/jsonl" ||
		!strings.Contains(resp.Header.Get("Content-Disposition"), ".jsonl") {
		t.Fatalf("Got(export) = %d %s %s; want 200 application/jsonl attachment", resp.StatusCode,
			resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"))
	}
	types := map[string]bool{}
	lines := 0
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			lines++
			var e audit.Event
			if err := json.Unmarshal(line, &e); err != nil {
				t.Fatalf("line %d: %v: %s", lines, err, line)
			}
			if e.ID == "" || e.Code == "" || e.TenantID != acme.ID {
				t.Errorf("Got(line %d) = %+v; want an event of %s with id and code", lines, e, acme.ID)
			}
			types[e.Type] = true
			if line[len(line)-1] != '\n' {
				t.Errorf("Got(line %d) lacks its newline", lines)
			}
		}
		if err != nil {
			break
		}
	}
	for _, want := range []string{audit.TypeTenantCreated, audit.TypeMemberInvited, audit.TypeLogin, audit.TypeTokenCreated} {
		if !types[want] {
			t.Errorf("Got(exported types) = %v; want %s among them", types, want)
		}
	}
	evs := env.Events(t, audit.TypeAuditExported)
	if len(evs) != exports+1 {
		t.Fatalf("Got(audit.exported events) = %d; want %d", len(evs), exports+1)
	}
	last := evs[len(evs)-1]
	if last.TenantID != acme.ID || last.ActorKind != "token" || last.ActorID != tok.ID || last.Details["format"] != "jsonl" {
		t.Errorf("Got(audit.exported) = %+v; want by token %s in %s, format jsonl", last, tok.ID, acme.ID)
	}

	if s, body, h := c.Request(t, http.MethodGet, "/api/v1/audit?format=xml", "", nil); s != http.StatusUnprocessableEntity {
		t.Errorf("Got(format=xml) = %d; want 422", s)
	} else if p := webtest.Problem(t, h, body); len(p.Errors) != 1 || p.Errors[0].Field != "format" {
		t.Errorf("Got(problem) = %+v; want the format field named", p)
	}
}
