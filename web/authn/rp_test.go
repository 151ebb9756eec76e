package authn

// The OIDC test: the whole login flow over real HTTP, against the development provider from
// web/devidp, with go-oidc verifying, and a net/http client with a cookie jar as the browser.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/net/html"
	"golang.org/x/oauth2"

	"github.com/stockade-dev/stockade/web/devidp"
)

const (
	testClientID     = "stockade"
	testClientSecret = "dev-secret"
	testEmail        = "dev@example.com"
	testName         = "Dev Eloper"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type envOptions struct {
	mutate        func(claims map[string]any) // devidp MutateClaims
	secureCookies bool
	rpSecret      string // the RP's client secret; default the registered one
}

// env is one server holding both the provider (under /dev-idp, as the lead mounts it) and the
// relying party's /login and /auth/callback handlers.
type env struct {
	srv     *httptest.Server
	base    string
	issuer  string
	idp     *devidp.Provider
	rp      *RP
	rpClock *clock
	key     []byte

	mu   sync.Mutex
	last *result
}

type result struct {
	id       Identity
	returnTo string
	err      error
}

func newEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	base := "http://" + srv.Listener.Addr().String()
	e := &env{
		srv:     srv,
		base:    base,
		issuer:  base + "/dev-idp",
		rpClock: &clock{now: time.Now()},
		key:     []byte("0123456789abcdef0123456789abcdef"),
	}
	idp, err := devidp.New(devidp.Config{
		Issuer:       e.issuer,
		Clients:      []devidp.Client{{ID: testClientID, Secret: testClientSecret, RedirectURIs: []string{base + "/auth/callback"}}},
		MutateClaims: opts.mutate,
	})
	if err != nil {
		t.Fatalf("devidp.New() = %v", err)
	}
	e.idp = idp
	mux.Handle("/dev-idp/", idp.Handler())
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		authURL, err := e.rp.Begin(w, r, r.URL.Query().Get("return_to"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		http.Redirect(w, r, authURL, http.StatusFound)
	})
	mux.HandleFunc("GET /auth/callback", func(w http.ResponseWriter, r *http.Request) {
		id, returnTo, err := e.rp.Finish(w, r)
		e.mu.Lock()
		e.last = &result{id: id, returnTo: returnTo, err: err}
		e.mu.Unlock()
		if err != nil {
			http.Error(w, "login failed", http.StatusForbidden)
			return
		}
		http.Redirect(w, r, returnTo, http.StatusFound)
	})
	srv.Start()
	t.Cleanup(srv.Close)

	secret := testClientSecret
	if opts.rpSecret != "" {
		secret = opts.rpSecret
	}
	rp, err := New(context.Background(), Config{
		Issuer:        e.issuer,
		ClientID:      testClientID,
		ClientSecret:  secret,
		RedirectURL:   base + "/auth/callback",
		HTTPClient:    srv.Client(),
		CookieKey:     e.key,
		SecureCookies: opts.secureCookies,
		Clock:         e.rpClock.Now,
	})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	e.rp = rp
	return e
}

// browser is a cookie-keeping client that stops at every redirect so the test sees each hop.
type browser struct {
	t   *testing.T
	e   *env
	jar *cookiejar.Jar
	c   *http.Client
}

func (e *env) browser(t *testing.T) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, e: e, jar: jar, c: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (b *browser) do(req *http.Request) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (b *browser) get(u string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.do(req)
}

func (b *browser) location(resp *http.Response) *url.URL {
	b.t.Helper()
	if resp.StatusCode/100 != 3 {
		b.t.Fatalf("Got(%s status) = %d; want a redirect", resp.Request.URL.Path, resp.StatusCode)
	}
	loc, err := resp.Location()
	if err != nil {
		b.t.Fatalf("Location: %v", err)
	}
	return loc
}

func (b *browser) flowCookie() *http.Cookie {
	u, _ := url.Parse(b.e.base + "/")
	for _, c := range b.jar.Cookies(u) {
		if c.Name == flowCookieName {
			return c
		}
	}
	return nil
}

func (b *browser) setFlowCookie(value string) {
	u, _ := url.Parse(b.e.base + "/")
	b.jar.SetCookies(u, []*http.Cookie{{Name: flowCookieName, Value: value, Path: "/"}})
}

// loginPage starts at the RP and returns the provider's form: its action and fields.
func (b *browser) loginPage(returnTo string) (string, url.Values) {
	b.t.Helper()
	resp, _ := b.get(b.e.base + "/login?return_to=" + url.QueryEscape(returnTo))
	authURL := b.location(resp)
	if !strings.HasPrefix(authURL.String(), b.e.issuer+"/authorize?") {
		b.t.Fatalf("Got(/login redirect) = %s; want the provider's authorize endpoint", authURL)
	}
	resp, page := b.get(authURL.String())
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("Got(authorize page status) = %d; want 200; body %s", resp.StatusCode, page)
	}
	if !strings.Contains(page, "Stockade development identity provider — not for production") {
		b.t.Fatalf("Got(login page) lacks the development provider title")
	}
	action, fields := parseForm(b.t, page)
	ref, err := url.Parse(action)
	if err != nil {
		b.t.Fatal(err)
	}
	return authURL.ResolveReference(ref).String(), fields
}

// submit posts the login form (pressing "Sign in" or "Cancel") and returns the callback URL the
// provider redirects to.
func (b *browser) submit(action string, fields url.Values, button string) *url.URL {
	b.t.Helper()
	fields.Set("email", testEmail)
	fields.Set("name", testName)
	fields.Set("action", button)
	req, _ := http.NewRequest(http.MethodPost, action, strings.NewReader(fields.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, body := b.do(req)
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("Got(POST authorize status) = %d; want 303; body %s", resp.StatusCode, body)
	}
	cb := b.location(resp)
	if got := cb.Scheme + "://" + cb.Host + cb.Path; got != b.e.base+"/auth/callback" {
		b.t.Fatalf("Got(provider redirect) = %s; want the RP callback", cb)
	}
	return cb
}

// callback follows the redirect to the RP and returns what Finish returned.
func (b *browser) callback(cb *url.URL) result {
	b.t.Helper()
	b.e.mu.Lock()
	b.e.last = nil
	b.e.mu.Unlock()
	resp, _ := b.get(cb.String())
	b.e.mu.Lock()
	res := b.e.last
	b.e.mu.Unlock()
	if res == nil {
		b.t.Fatalf("callback handler did not run (status %d)", resp.StatusCode)
	}
	if c := b.flowCookie(); c != nil {
		b.t.Errorf("Got(flow cookie after callback) = %q; want it cleared", c.Value)
	}
	return *res
}

// parseForm reads the login page like a browser: the form's action and its input values.
func parseForm(t *testing.T, page string) (string, url.Values) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("parse login page: %v", err)
	}
	var action string
	fields := url.Values{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			attrs := map[string]string{}
			for _, a := range n.Attr {
				attrs[a.Key] = a.Val
			}
			switch n.Data {
			case "form":
				action = attrs["action"]
			case "input":
				if name := attrs["name"]; name != "" {
					fields.Set(name, attrs["value"])
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if action == "" {
		t.Fatalf("Got(login page) has no form")
	}
	return action, fields
}

var subjectRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestLoginFlow(t *testing.T) {
	tests := []struct {
		name    string
		opts    envOptions
		button  string                                      // default "login"
		tamper  func(t *testing.T, b *browser, cb *url.URL) // before the callback
		wantErr error                                       // nil: the login succeeds
		check   func(t *testing.T, err error)
	}{
		{name: "happy path"},
		{
			name: "bad state",
			tamper: func(_ *testing.T, _ *browser, cb *url.URL) {
				q := cb.Query()
				q.Set("state", "forged-state")
				cb.RawQuery = q.Encode()
			},
			wantErr: errState,
		},
		{
			name:    "missing flow cookie",
			tamper:  func(_ *testing.T, b *browser, _ *url.URL) { b.setFlowCookie("") },
			wantErr: errFlowCookie,
		},
		{
			name: "forged flow cookie",
			tamper: func(t *testing.T, b *browser, _ *url.URL) {
				f, err := openFlow(b.e.key, b.flowCookie().Value, b.e.rpClock.Now())
				if err != nil {
					t.Fatal(err)
				}
				f.ReturnTo = "/admin"
				forged, _ := sealFlow([]byte("another key, 32 bytes long......"), f)
				b.setFlowCookie(forged)
			},
			wantErr: errFlowCookie,
		},
		{
			name:    "flow cookie expired",
			tamper:  func(_ *testing.T, b *browser, _ *url.URL) { b.e.rpClock.Advance(flowTTL + time.Second) },
			wantErr: errFlowCookie,
		},
		{
			name: "wrong PKCE verifier",
			// Re-sign the flow with the right key but another verifier: only the provider's
			// PKCE check stands in the way.
			tamper: func(t *testing.T, b *browser, _ *url.URL) {
				f, err := openFlow(b.e.key, b.flowCookie().Value, b.e.rpClock.Now())
				if err != nil {
					t.Fatal(err)
				}
				f.Verifier = oauth2.GenerateVerifier()
				b.setFlowCookie(mustSeal(t, b.e.key, f))
			},
			wantErr: errExchange,
			check:   wantInMessage("invalid_grant"),
		},
		{
			name:    "wrong client secret",
			opts:    envOptions{rpSecret: "not-the-secret"},
			wantErr: errExchange,
			check:   wantInMessage("invalid_client"),
		},
		{
			name:    "user cancels",
			button:  "deny",
			wantErr: errProvider,
			check:   wantInMessage("access_denied"),
		},
		{
			name: "no code",
			tamper: func(_ *testing.T, _ *browser, cb *url.URL) {
				q := cb.Query()
				q.Del("code")
				cb.RawQuery = q.Encode()
			},
			wantErr: errCallback,
		},
		{
			name: "iss parameter of another provider",
			tamper: func(_ *testing.T, _ *browser, cb *url.URL) {
				q := cb.Query()
				q.Set("iss", "https://evil.example")
				cb.RawQuery = q.Encode()
			},
			wantErr: errCallback,
		},
		{
			name:    "wrong nonce",
			opts:    envOptions{mutate: func(c map[string]any) { c["nonce"] = "another-nonce" }},
			wantErr: errNonce,
		},
		{
			name:    "no nonce",
			opts:    envOptions{mutate: func(c map[string]any) { delete(c, "nonce") }},
			wantErr: errNonce,
		},
		{
			name:    "wrong audience",
			opts:    envOptions{mutate: func(c map[string]any) { c["aud"] = "another-client" }},
			wantErr: errIDToken,
			check:   wantInMessage("audience"),
		},
		{
			name:    "wrong issuer in token",
			opts:    envOptions{mutate: func(c map[string]any) { c["iss"] = "https://other-issuer.example" }},
			wantErr: errIDToken,
			check:   wantInMessage("issuer"),
		},
		{
			name: "expired token",
			opts: envOptions{mutate: func(c map[string]any) {
				c["exp"] = time.Now().Add(-time.Minute).Unix()
			}},
			wantErr: errIDToken,
			check:   wantAs[*oidc.TokenExpiredError](),
		},
		{
			name:    "token expired by the RP clock",
			tamper:  func(_ *testing.T, b *browser, _ *url.URL) { b.e.rpClock.Advance(6 * time.Minute) },
			wantErr: errIDToken,
			check:   wantAs[*oidc.TokenExpiredError](),
		},
		{
			name:    "empty subject",
			opts:    envOptions{mutate: func(c map[string]any) { c["sub"] = "" }},
			wantErr: errIDToken,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.opts)
			b := e.browser(t)
			action, fields := b.loginPage("/sandboxes?tab=1")
			button := tt.button
			if button == "" {
				button = "login"
			}
			cb := b.submit(action, fields, button)
			if tt.tamper != nil {
				tt.tamper(t, b, cb)
			}
			res := b.callback(cb)

			if tt.wantErr != nil {
				if !errors.Is(res.err, ErrLogin) || !errors.Is(res.err, tt.wantErr) {
					t.Fatalf("Got(Finish error) = %v; want ErrLogin and %v", res.err, tt.wantErr)
				}
				if code := cb.Query().Get("code"); code != "" && strings.Contains(res.err.Error(), code) {
					t.Errorf("Got(Finish error) = %v; want no authorization code in it", res.err)
				}
				t.Logf("Finish error: %v", res.err)
				if tt.check != nil {
					tt.check(t, res.err)
				}
				return
			}
			if res.err != nil {
				t.Fatalf("Got(Finish error) = %v; want nil", res.err)
			}
			want := Identity{Issuer: e.issuer, Subject: res.id.Subject, Email: testEmail, Name: testName, EmailVerified: true}
			if res.id != want || !subjectRE.MatchString(res.id.Subject) {
				t.Errorf("Got(identity) = %+v; want %+v with a 32-hex subject", res.id, want)
			}
			if res.returnTo != "/sandboxes?tab=1" {
				t.Errorf("Got(returnTo) = %q; want /sandboxes?tab=1", res.returnTo)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantInMessage(s string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Got(error) = %v; want it to mention %s", err, s)
		}
	}
}

func wantAs[T error]() func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var target T
		if !errors.As(err, &target) {
			t.Errorf("Got(error) = %v; want a %T in the chain", err, target)
		}
	}
}

// TestSubjectStable: the same person logging in twice is the same subject.
func TestSubjectStable(t *testing.T) {
	e := newEnv(t, envOptions{})
	var subjects []string
	for i := range 2 {
		b := e.browser(t)
		action, fields := b.loginPage("/")
		res := b.callback(b.submit(action, fields, "login"))
		if res.err != nil {
			t.Fatalf("login %d: Got(Finish error) = %v; want nil", i, res.err)
		}
		subjects = append(subjects, res.id.Subject)
	}
	if subjects[0] != subjects[1] {
		t.Errorf("Got(subjects) = %v; want the same subject twice", subjects)
	}
}

// TestReplayedCallback: the same callback URL twice. The second time the browser even still
// has the flow cookie, so only the provider's one-time code check can refuse it.
func TestReplayedCallback(t *testing.T) {
	e := newEnv(t, envOptions{})
	b := e.browser(t)
	action, fields := b.loginPage("/")
	cb := b.submit(action, fields, "login")
	cookie := b.flowCookie().Value

	if res := b.callback(cb); res.err != nil {
		t.Fatalf("Got(first callback) = %v; want nil", res.err)
	}
	// Without the cookie the replay fails before reaching the provider.
	if res := b.callback(cb); !errors.Is(res.err, errFlowCookie) {
		t.Errorf("Got(replay without cookie) = %v; want %v", res.err, errFlowCookie)
	}
	b.setFlowCookie(cookie)
	res := b.callback(cb)
	if !errors.Is(res.err, ErrLogin) || !errors.Is(res.err, errExchange) {
		t.Fatalf("Got(replay with cookie) = %v; want ErrLogin and %v", res.err, errExchange)
	}
	wantInMessage("invalid_grant")(t, res.err)
}

func TestNewRejectsIssuer(t *testing.T) {
	e := newEnv(t, envOptions{})
	// A second server mirrors the provider under another path, as a misconfigured proxy
	// would: its discovery document names the real issuer.
	alias := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/dev-idp" + strings.TrimPrefix(r.URL.Path, "/alias")
		e.idp.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(alias.Close)
	// A provider whose metadata is incomplete or refuses PKCE S256.
	meta := func(doc map[string]any) *httptest.Server {
		var srv *httptest.Server
		srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			doc["issuer"] = srv.URL
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, "%s", mustJSON(t, doc))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	noToken := meta(map[string]any{"authorization_endpoint": "http://x/a", "jwks_uri": "http://x/j"})
	plainOnly := meta(map[string]any{"authorization_endpoint": "http://x/a", "token_endpoint": "http://x/t",
		"jwks_uri": "http://x/j", "code_challenge_methods_supported": []string{"plain"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()

	tests := []struct {
		name    string
		issuer  string
		wantIn  []string
		wantErr func(*testing.T, error)
	}{
		{"unreachable", "http://" + closedAddr + "/dev-idp", []string{"connection refused"}, nil},
		{"not found", e.base + "/nothing-here", []string{"404"}, nil},
		{"discovery names another issuer", alias.URL + "/alias", nil, wantAs[*oidc.IssuerMismatchError]()},
		{"trailing slash", e.issuer + "/", nil, wantAs[*oidc.IssuerMismatchError]()},
		{"missing endpoint", noToken.URL, []string{"metadata lacks token_endpoint"}, nil},
		{"no PKCE S256", plainOnly.URL, []string{"PKCE S256 not supported"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rp, err := New(ctx, Config{Issuer: tt.issuer, ClientID: testClientID, ClientSecret: testClientSecret,
				RedirectURL: e.base + "/auth/callback", CookieKey: e.key})
			if !errors.Is(err, ErrDiscovery) {
				t.Fatalf("Got(New) = %v, %v; want an ErrDiscovery error", rp, err)
			}
			t.Logf("New error: %v", err)
			wantPrefix := fmt.Sprintf("oidc issuer %q: discovery: ", tt.issuer)
			if !strings.HasPrefix(err.Error(), wantPrefix) {
				t.Errorf("Got(error) = %q; want it to start with %q", err, wantPrefix)
			}
			for _, s := range tt.wantIn {
				wantInMessage(s)(t, err)
			}
			if tt.wantErr != nil {
				tt.wantErr(t, err)
			}
		})
	}
}

func TestNewRejectsConfig(t *testing.T) {
	good := Config{Issuer: "http://127.0.0.1:1/dev-idp", ClientID: "c", RedirectURL: "http://127.0.0.1:1/cb",
		CookieKey: make([]byte, 32)}
	tests := []struct {
		name   string
		change func(c *Config)
	}{
		{"no issuer", func(c *Config) { c.Issuer = "" }},
		{"no client id", func(c *Config) { c.ClientID = "" }},
		{"no redirect URL", func(c *Config) { c.RedirectURL = "" }},
		{"short cookie key", func(c *Config) { c.CookieKey = make([]byte, 31) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.change(&cfg)
			if _, err := New(context.Background(), cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("Got(New) = %v; want ErrConfig", err)
			}
		})
	}
}
