// Package webtest starts the whole web app for tests: real database, the
// real development OIDC provider over HTTP, the real server on a loopback
// listener. Clients sign in through the provider's login form like a person.
package webtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"golang.org/x/net/html"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/cmd/stockade/app"
	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/web/forward"
)

// Options tune the environment. The app is built by the composition root
// (cmd/stockade/app), as `stockade serve` builds it; a store or service set
// here replaces the one it would build, and its maker runs it. Nothing is
// started: the VM pools built here never reach libvirt, so everything that
// needs a VM answers 503 (unavailable), unless the test passes running
// VMs and Sandboxes.
type Options struct {
	DB           *gorm.DB // default: a fresh SQLite database
	Operators    []string // platform operator emails
	MutateClaims func(map[string]any)
	// Clock is the app's one clock (a clockwork fake moves time without
	// sleeping: sessions, tokens and codes expire); default the real one.
	Clock clockwork.Clock
	// BodyTimeout shortens how long a request body may take (zero: the
	// server's default).
	BodyTimeout time.Duration
	// SessionIdle and SessionAbsolute override the session expiries.
	SessionIdle, SessionAbsolute time.Duration
	// NoOpenAPICheck serves the app without checking each answer against
	// the OpenAPI document: for benchmarks, where the check would slow
	// the native API only.
	NoOpenAPICheck bool
	// VMs runs the tenant VM pools; nil: pools that are never started
	// (the VM pages say the hypervisor is unavailable).
	VMs *vmpool.Service
	// Sandboxes runs the sandboxes; nil: a service on those pools, which
	// serves the stored sandboxes only (every change, exec and file
	// answers 503).
	Sandboxes *sandbox.Service
	// Terminals runs the terminals; nil: a service in Sandboxes (so with
	// no VMs every new terminal answers 503), recordings in a temporary
	// data dir.
	Terminals *terminal.Service
	// Secrets keeps secrets; nil: a store on DB under the test root key.
	Secrets *secrets.Store
	// Policies keeps policy versions; nil: a store on DB.
	Policies *policy.Store
	// Egress keeps the egress gateway's decisions; nil: a store on DB.
	Egress *egress.Store
	// Usage meters and prices usage; nil: a store on DB.
	Usage *usage.Store
	// Compliance evaluates the checklist (*compliance.Service); nil: the
	// production service on DB, not started (its probe needs sandboxes,
	// so it answers 503).
	Compliance handlers.Compliance
	// Workflows keeps workflows; nil: a store on DB.
	Workflows *workflow.Store
	// Runs executes runs; nil: an engine on DB running in Sandboxes.
	Runs *runs.Engine
	// Integrations keeps webhook endpoints; nil: a store on DB with the
	// production rules (https, public hosts only).
	Integrations *integrations.Store
	// Owners makes the app a replica that forwards channel requests to
	// their owner (web/forward); nil: one replica, no forwarding.
	Owners forward.Owners
	// TemplateMaxUploadBytes bounds template image uploads (0: 2 GiB).
	TemplateMaxUploadBytes int64
	// PreviewDomain serves preview links at <port>-<sandbox id>.<domain>
	// (requests name it in their Host); empty: /preview/<token>/ only.
	PreviewDomain string
}

// Env is a running app.
type Env struct {
	URL       string
	DB        *gorm.DB
	Store     *tenants.Store
	Audit     *audit.Log
	App       *app.App
	Terminals *terminal.Service
	Secrets   *secrets.Store
	Policies  *policy.Store
	Usage     *usage.Store
	Workflows *workflow.Store
	Runs      *runs.Engine
	// Integrations keeps webhook endpoints and deliveries (nothing
	// dispatches them unless the test runs an integrations.Dispatcher).
	Integrations *integrations.Store
}

// New starts the app; it stops at the end of the test.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	db := o.DB
	if db == nil {
		db = dbtest.SQLite(t)
	}
	dataDir := t.TempDir()
	srv := httptest.NewUnstartedServer(nil)
	publicURL := "http://" + srv.Listener.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, app.Config{
		PublicURL: publicURL, DataDir: dataDir, RootKey: []byte(rootKey), OperatorEmails: o.Operators, Version: "test",
		SessionIdle: o.SessionIdle, SessionAbsolute: o.SessionAbsolute, BodyTimeout: o.BodyTimeout,
		TemplateMaxUploadBytes: o.TemplateMaxUploadBytes, PreviewDomain: o.PreviewDomain,
	}, app.Options{
		Log: slog.New(slog.DiscardHandler), Clock: o.Clock, DevIdPMutateClaims: o.MutateClaims, DB: db,
		VMs: o.VMs, Sandboxes: o.Sandboxes, Terminals: o.Terminals, Secrets: o.Secrets, Policies: o.Policies, Egress: o.Egress,
		Usage: o.Usage, Compliance: o.Compliance, Workflows: o.Workflows, Runs: o.Runs, Integrations: o.Integrations, Owners: o.Owners,
	})
	if err != nil {
		cancel()
		t.Fatalf("app.New: %v", err)
	}
	// Before the database closes: runs still executing end, live
	// terminals end and their connections close.
	t.Cleanup(a.Close)
	// Every answer the suite sees is checked against the served OpenAPI
	// document (openapi.go).
	srv.Config.Handler = OpenAPIChecked(t, a.Handler())
	if o.NoOpenAPICheck {
		srv.Config.Handler = a.Handler()
	}
	srv.Start()
	t.Cleanup(func() { cancel(); srv.Close() })
	if err := a.ConnectDevIdP(ctx); err != nil {
		t.Fatalf("ConnectDevIdP: %v", err)
	}
	return &Env{URL: publicURL, DB: db, Store: a.Store, Audit: a.Audit, App: a, Terminals: a.Terminals, Secrets: a.Secrets,
		Policies: a.Policies, Usage: a.Usage, Workflows: a.Workflows, Runs: a.Runs, Integrations: a.Integrations}
}

// rootKey is the test app's root key (cookies, secrets at rest).
const rootKey = "0123456789abcdef0123456789abcdef"

var system = audit.Actor{Kind: "system", ID: "test"}

// Tenant creates a tenant.
func (e *Env) Tenant(t testing.TB, slug string) tenants.Tenant {
	t.Helper()
	tn, err := e.Store.CreateTenant(context.Background(), system, slug, "")
	if err != nil {
		t.Fatalf("CreateTenant(%s): %v", slug, err)
	}
	return tn
}

// Member invites email into tenant with role (active at first login).
func (e *Env) Member(t testing.TB, tn tenants.Tenant, email string, role tenants.Role) {
	t.Helper()
	if _, err := e.Store.InviteMember(context.Background(), system, tn.ID, email, role); err != nil {
		t.Fatalf("InviteMember(%s, %s): %v", tn.Slug, email, err)
	}
}

// Token makes an API token of tenant with role and returns its secret.
func (e *Env) Token(t testing.TB, tn tenants.Tenant, role tenants.Role) string {
	t.Helper()
	secret, _, err := e.Store.CreateToken(context.Background(), system, tn.ID, tenants.NewToken{Name: "test-" + string(role), Role: role})
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	return secret
}

// Client is a browser-like HTTP client: cookie jar, no automatic redirects.
type Client struct {
	*http.Client
	Base   string
	Bearer string
	// csrfFor and csrfToken remember the CSRF token a page gave for one
	// pair of CSRF and session cookies.
	csrfFor, csrfToken string
}

// Anonymous returns a client with an empty cookie jar.
func (e *Env) Anonymous() *Client {
	jar, _ := cookiejar.New(nil)
	return &Client{Base: e.URL, Client: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// WithToken returns a client that sends an API token.
func (e *Env) WithToken(secret string) *Client {
	c := e.Anonymous()
	c.Bearer = secret
	return c
}

// Login signs in as email through the development provider's form and
// returns the signed-in client, having followed the redirects to the end.
func (e *Env) Login(t testing.TB, email string) *Client {
	t.Helper()
	c := e.Anonymous()
	final, err := c.LoginFlow(email)
	if err != nil {
		t.Fatalf("login as %s: %v", email, err)
	}
	if final.StatusCode >= 400 {
		t.Fatalf("login as %s ended with %d", email, final.StatusCode)
	}
	return c
}

// LoginFlow runs the whole browser flow and returns the last response.
func (c *Client) LoginFlow(email string) (*http.Response, error) {
	resp, err := c.Get(c.Base + "/login/start?return_to=/")
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		return nil, fmt.Errorf("login start: status %d", resp.StatusCode)
	}
	authURL := resp.Header.Get("Location")
	page, err := c.Get(authURL)
	if err != nil {
		return nil, err
	}
	form, action, err := parseForm(page.Body)
	page.Body.Close()
	if err != nil {
		return nil, err
	}
	form.Set("email", email)
	form.Set("name", strings.Split(email, "@")[0])
	form.Set("action", "login")
	au, _ := url.Parse(authURL)
	target, _ := au.Parse(action)
	resp, err = c.PostForm(target.String(), form)
	if err != nil {
		return nil, err
	}
	return c.follow(resp)
}

// CallbackURL runs the flow up to the provider's redirect back to us and
// returns that URL without visiting it (for replay and state tests).
func (c *Client) CallbackURL(email string) (string, error) {
	resp, err := c.Get(c.Base + "/login/start?return_to=/")
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	authURL := resp.Header.Get("Location")
	page, err := c.Get(authURL)
	if err != nil {
		return "", err
	}
	form, action, err := parseForm(page.Body)
	page.Body.Close()
	if err != nil {
		return "", err
	}
	form.Set("email", email)
	form.Set("action", "login")
	au, _ := url.Parse(authURL)
	target, _ := au.Parse(action)
	resp, err = c.PostForm(target.String(), form)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return resp.Header.Get("Location"), nil
}

func (c *Client) follow(resp *http.Response) (*http.Response, error) {
	for i := 0; i < 10 && resp.StatusCode >= 300 && resp.StatusCode < 400; i++ {
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp, err = c.Get(loc.String()); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

func parseForm(r io.Reader) (url.Values, string, error) {
	doc, err := html.Parse(r)
	if err != nil {
		return nil, "", err
	}
	vals := url.Values{}
	action := ""
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			attr := func(k string) string {
				for _, a := range n.Attr {
					if a.Key == k {
						return a.Val
					}
				}
				return ""
			}
			switch n.Data {
			case "form":
				if action == "" {
					action = attr("action")
				}
			case "input":
				if attr("name") != "" {
					vals.Set(attr("name"), attr("value"))
				}
			}
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(doc)
	if action == "" {
		return nil, "", fmt.Errorf("no form on the page")
	}
	return vals, action, nil
}

// CSRF returns the CSRF token the server gives this client's pages: it is
// bound to the client's CSRF cookie and session, so it is read from a page
// (the first one issues the cookie) whenever either has changed.
func (c *Client) CSRF(t testing.TB) string {
	t.Helper()
	pair := c.csrfPair()
	if c.csrfToken != "" && c.csrfFor == pair {
		return c.csrfToken
	}
	// /login shows anonymous callers the sign-in page and sends others on
	// to theirs (the dashboard or the tenant chooser): every one carries it.
	resp, err := c.Get(c.Base + "/login")
	if err == nil {
		resp, err = c.follow(resp)
	}
	if err != nil {
		t.Fatalf("GET /login: %v", err)
	}
	defer resp.Body.Close()
	doc, err := html.Parse(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", resp.Request.URL, err)
	}
	tok := ""
	for _, n := range (Doc{doc}).find(func(n *html.Node) bool { return n.Data == "body" }) {
		var hdr map[string]string
		if v := attr(n, "hx-headers"); v != "" && json.Unmarshal([]byte(v), &hdr) == nil {
			tok = hdr["X-CSRF-Token"]
		}
	}
	if tok == "" {
		t.Fatalf("Got(page %s) without a CSRF token (status %d)", resp.Request.URL, resp.StatusCode)
	}
	c.csrfFor, c.csrfToken = c.csrfPair(), tok
	return tok
}

// csrfPair is what the CSRF token depends on: the CSRF and session cookies
// (plain http and __Host- names).
func (c *Client) csrfPair() string {
	return strings.Join([]string{c.Cookie(CSRFCookieName), c.Cookie("__Host-" + CSRFCookieName),
		c.Session(), c.Cookie("__Host-" + SessionCookieName)}, "|")
}

// Do sends a request with the client's token, if any.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	if c.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.Bearer)
	}
	return c.Client.Do(req)
}

// Request sends method path with an optional body and content type, and
// returns the status and body.
func (c *Client) Request(t testing.TB, method, path, contentType string, body io.Reader, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, c.Base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// GetPage fetches a path.
func (c *Client) GetPage(t testing.TB, path string) (int, string) {
	t.Helper()
	s, b, _ := c.Request(t, http.MethodGet, path, "", nil)
	return s, b
}

// PostForm posts a form with the client's CSRF token.
func (c *Client) Post(t testing.TB, path string, form url.Values) (int, string, http.Header) {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if c.Bearer == "" {
		form.Set("_csrf", c.CSRF(t))
	}
	return c.Request(t, http.MethodPost, path, "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
}

// JSON sends a JSON body (with the CSRF header when cookie-authenticated)
// and decodes a JSON answer into out when out is non-nil.
func (c *Client) JSON(t testing.TB, method, path string, in, out any) (int, string) {
	t.Helper()
	var body io.Reader
	if in != nil {
		switch v := in.(type) {
		case string:
			body = strings.NewReader(v)
		default:
			b, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			body = strings.NewReader(string(b))
		}
	}
	var hdr []string
	if c.Bearer == "" && method != http.MethodGet {
		hdr = []string{"X-CSRF-Token", c.CSRF(t)}
	}
	ct := ""
	if in != nil {
		ct = "application/json"
	}
	status, b, _ := c.Request(t, method, path, ct, body, hdr...)
	if out != nil && strings.HasPrefix(strings.TrimSpace(b), "{") {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			t.Fatalf("decode %s %s: %v: %s", method, path, err, b)
		}
	}
	return status, b
}
