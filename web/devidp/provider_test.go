package devidp_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	"github.com/stockade-dev/stockade/web/devidp"
)

const (
	clientID     = "stockade"
	clientSecret = "s3cret/with+odd&chars"
)

// clock is a settable test clock.
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

type harness struct {
	srv         *httptest.Server
	idp         *devidp.Provider
	clock       *clock
	issuer      string
	redirectURI string
	http        *http.Client // never follows redirects: the tests look at them
}

// start runs a provider under /dev-idp on a real HTTP server. The redirect URI points at the
// same server; nothing serves it, the tests only read the Location header.
func start(t *testing.T, mutate func(map[string]any)) *harness {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	h := &harness{
		srv:         srv,
		clock:       &clock{now: time.Now()},
		issuer:      base + "/dev-idp",
		redirectURI: base + "/auth/callback",
		http: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
	}
	idp, err := devidp.New(devidp.Config{
		Issuer:       h.issuer,
		Clients:      []devidp.Client{{ID: clientID, Secret: clientSecret, RedirectURIs: []string{h.redirectURI}}, {ID: "other", Secret: "other-secret", RedirectURIs: []string{h.redirectURI}}},
		Clock:        h.clock.Now,
		MutateClaims: mutate,
		DefaultEmail: "prefill@example.com",
	})
	if err != nil {
		t.Fatalf("devidp.New() = %v", err)
	}
	h.idp = idp
	srv.Config.Handler = idp.Handler()
	srv.Start()
	t.Cleanup(srv.Close)
	return h
}

func challenge(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// authParams is a valid authorization request for clientID.
func (h *harness) authParams(verifier string) url.Values {
	return url.Values{
		"client_id":             {clientID},
		"redirect_uri":          {h.redirectURI},
		"response_type":         {"code"},
		"scope":                 {"openid email profile"},
		"state":                 {"state-123"},
		"nonce":                 {"nonce-456"},
		"code_challenge":        {challenge(verifier)},
		"code_challenge_method": {"S256"},
	}
}

// login submits the login form as a browser would and returns the code from the redirect.
func (h *harness) login(t *testing.T, params url.Values, email string) string {
	t.Helper()
	form := url.Values{}
	for k, v := range params {
		form[k] = v
	}
	form.Set("email", email)
	form.Set("name", "Dev Eloper")
	form.Set("action", "login")
	resp, err := h.http.PostForm(h.issuer+"/authorize", form)
	if err != nil {
		t.Fatalf("POST /authorize: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("Got(POST /authorize status) = %d; want 303", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatalf("parse Location: %v", err)
	}
	if got := loc.Query().Get("state"); got != params.Get("state") {
		t.Fatalf("Got(redirect state) = %q; want %q", got, params.Get("state"))
	}
	code := loc.Query().Get("code")
	if code == "" {
		t.Fatalf("Got(redirect) = %s; want a code", loc)
	}
	return code
}

type tokenRequest struct {
	basicID, basicSecret string // client_secret_basic when basicID is set
	form                 url.Values
}

func (h *harness) token(t *testing.T, req tokenRequest) (int, map[string]any) {
	t.Helper()
	hr, err := http.NewRequest(http.MethodPost, h.issuer+"/token", strings.NewReader(req.form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if req.basicID != "" {
		hr.SetBasicAuth(url.QueryEscape(req.basicID), url.QueryEscape(req.basicSecret))
	}
	resp, err := h.http.Do(hr)
	if err != nil {
		t.Fatalf("POST /token: %v", err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Got(token Cache-Control) = %q; want no-store", got)
	}
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("decode token response: %v", err)
	}
	return resp.StatusCode, body
}

func (h *harness) codeForm(code, verifier string) url.Values {
	return url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {h.redirectURI},
		"code_verifier": {verifier},
	}
}

func (h *harness) userinfo(t *testing.T, accessToken string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.issuer+"/userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+accessToken)
	resp, err := h.http.Do(req)
	if err != nil {
		t.Fatalf("GET /userinfo: %v", err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := devidp.Client{ID: "c", Secret: "s", RedirectURIs: []string{"http://127.0.0.1/cb"}}
	tests := []struct {
		name string
		cfg  devidp.Config
	}{
		{"no issuer", devidp.Config{Clients: []devidp.Client{good}}},
		{"relative issuer", devidp.Config{Issuer: "/dev-idp", Clients: []devidp.Client{good}}},
		{"trailing slash", devidp.Config{Issuer: "http://h/dev-idp/", Clients: []devidp.Client{good}}},
		{"issuer with query", devidp.Config{Issuer: "http://h/dev-idp?x=1", Clients: []devidp.Client{good}}},
		{"no clients", devidp.Config{Issuer: "http://h/dev-idp"}},
		{"no secret", devidp.Config{Issuer: "http://h/dev-idp", Clients: []devidp.Client{{ID: "c", RedirectURIs: good.RedirectURIs}}}},
		{"duplicate client", devidp.Config{Issuer: "http://h/dev-idp", Clients: []devidp.Client{good, good}}},
		{"no redirect", devidp.Config{Issuer: "http://h/dev-idp", Clients: []devidp.Client{{ID: "c", Secret: "s"}}}},
		{"relative redirect", devidp.Config{Issuer: "http://h/dev-idp", Clients: []devidp.Client{{ID: "c", Secret: "s", RedirectURIs: []string{"/cb"}}}}},
		{"odd redirect host", devidp.Config{Issuer: "http://h/dev-idp", Clients: []devidp.Client{{ID: "c", Secret: "s", RedirectURIs: []string{"http://a;b/cb"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := devidp.New(tt.cfg)
			if !errors.Is(err, devidp.ErrConfig) {
				t.Errorf("Got(New() error) = %v; want ErrConfig", err)
			}
		})
	}
}

// TestDiscovery checks the metadata document and that go-oidc accepts it as a provider.
func TestDiscovery(t *testing.T) {
	h := start(t, nil)
	resp, err := http.Get(h.issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var meta map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil {
		t.Fatal(err)
	}
	wantStrings := map[string]string{
		"issuer":                 h.issuer,
		"authorization_endpoint": h.issuer + "/authorize",
		"token_endpoint":         h.issuer + "/token",
		"jwks_uri":               h.issuer + "/jwks",
		"userinfo_endpoint":      h.issuer + "/userinfo",
	}
	for k, want := range wantStrings {
		if got := meta[k]; got != want {
			t.Errorf("Got(%s) = %v; want %q", k, got, want)
		}
	}
	wantLists := map[string][]string{
		"response_types_supported":              {"code"},
		"code_challenge_methods_supported":      {"S256"},
		"id_token_signing_alg_values_supported": {"ES256"},
		"subject_types_supported":               {"public"},
		"token_endpoint_auth_methods_supported": {"client_secret_basic", "client_secret_post"},
	}
	for k, want := range wantLists {
		got, _ := json.Marshal(meta[k])
		wantJSON, _ := json.Marshal(want)
		if string(got) != string(wantJSON) {
			t.Errorf("Got(%s) = %s; want %s", k, got, wantJSON)
		}
	}
	if _, err := oidc.NewProvider(context.Background(), h.issuer); err != nil {
		t.Errorf("Got(oidc.NewProvider) = %v; want nil", err)
	}
}

func TestJWKS(t *testing.T) {
	h := start(t, nil)
	resp, err := http.Get(h.issuer + "/jwks")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		t.Fatalf("decode JWKS: %v", err)
	}
	if len(set.Keys) != 1 {
		t.Fatalf("Got(len(keys)) = %d; want 1", len(set.Keys))
	}
	k := set.Keys[0]
	if k.KeyID == "" || k.Algorithm != "ES256" || k.Use != "sig" || !k.IsPublic() || !k.Valid() {
		t.Errorf("Got(key) = kid %q alg %q use %q public %v; want kid set, ES256, sig, public", k.KeyID, k.Algorithm, k.Use, k.IsPublic())
	}
}

func TestLoginPage(t *testing.T) {
	h := start(t, nil)
	params := h.authParams(oauth2.GenerateVerifier())
	params.Set("state", `st"<ate>`)
	resp, err := h.http.Get(h.issuer + "/authorize?" + params.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	page := string(body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Got(status) = %d; want 200; body %s", resp.StatusCode, page)
	}
	for _, want := range []string{
		"<title>Stockade development identity provider — not for production</title>",
		`<form method="post" action="/dev-idp/authorize">`,
		`value="prefill@example.com"`,
		`name="state" value="st&#34;&lt;ate&gt;"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("Got(page) lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(page), "<script") || strings.Contains(strings.ToLower(page), "<style") {
		t.Errorf("Got(page) has a script or style element; want none")
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "form-action 'self' " + h.srv.URL} {
		if !strings.Contains(csp, want) {
			t.Errorf("Got(CSP) = %q; want it to contain %q", csp, want)
		}
	}
}

func TestAuthorizeRejects(t *testing.T) {
	tests := []struct {
		name      string
		change    func(h *harness, v url.Values)
		wantError string // "" = a 400 page, nothing sent to the redirect URI
	}{
		{"unknown client", func(_ *harness, v url.Values) { v.Set("client_id", "nobody") }, ""},
		{"missing redirect_uri", func(_ *harness, v url.Values) { v.Del("redirect_uri") }, ""},
		{"unregistered redirect_uri", func(h *harness, v url.Values) { v.Set("redirect_uri", h.redirectURI+"/x") }, ""},
		{"redirect_uri prefix only", func(h *harness, v url.Values) { v.Set("redirect_uri", h.redirectURI+"?next=/") }, ""},
		{"implicit flow", func(_ *harness, v url.Values) { v.Set("response_type", "token") }, "unsupported_response_type"},
		{"no openid scope", func(_ *harness, v url.Values) { v.Set("scope", "email profile") }, "invalid_scope"},
		{"no code_challenge", func(_ *harness, v url.Values) { v.Del("code_challenge") }, "invalid_request"},
		{"no challenge method", func(_ *harness, v url.Values) { v.Del("code_challenge_method") }, "invalid_request"},
		{"plain method", func(_ *harness, v url.Values) { v.Set("code_challenge_method", "plain") }, "invalid_request"},
		{"malformed challenge", func(_ *harness, v url.Values) { v.Set("code_challenge", "short") }, "invalid_request"},
		{"prompt none", func(_ *harness, v url.Values) { v.Set("prompt", "none") }, "login_required"},
	}
	h := start(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := h.authParams(oauth2.GenerateVerifier())
			tt.change(h, params)
			resp, err := h.http.Get(h.issuer + "/authorize?" + params.Encode())
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if tt.wantError == "" {
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
					t.Fatalf("Got(status, Location) = %d, %q; want 400 without a redirect", resp.StatusCode, resp.Header.Get("Location"))
				}
				if !strings.Contains(string(body), "not for production") {
					t.Errorf("Got(error page) = %s; want the development provider label", body)
				}
				return
			}
			loc, err := url.Parse(resp.Header.Get("Location"))
			if resp.StatusCode != http.StatusSeeOther || err != nil {
				t.Fatalf("Got(status, Location) = %d, %q; want a redirect", resp.StatusCode, resp.Header.Get("Location"))
			}
			if got := loc.Scheme + "://" + loc.Host + loc.Path; got != h.redirectURI {
				t.Errorf("Got(redirect target) = %s; want %s", got, h.redirectURI)
			}
			q := loc.Query()
			if q.Get("error") != tt.wantError || q.Get("state") != "state-123" || q.Has("code") {
				t.Errorf("Got(redirect query) = %v; want error=%s, state=state-123, no code", q, tt.wantError)
			}
		})
	}
}

func TestLoginFormChecksInput(t *testing.T) {
	h := start(t, nil)
	params := h.authParams(oauth2.GenerateVerifier())
	for _, email := range []string{"", "not-an-email", "Dev <dev@example.com>"} {
		t.Run(email, func(t *testing.T) {
			form := url.Values{}
			for k, v := range params {
				form[k] = v
			}
			form.Set("email", email)
			resp, err := h.http.PostForm(h.issuer+"/authorize", form)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
				t.Fatalf("Got(status) = %d, Location %q; want 400 and the form again", resp.StatusCode, resp.Header.Get("Location"))
			}
			if !strings.Contains(string(body), `role="alert"`) || !strings.Contains(string(body), "<form") {
				t.Errorf("Got(page) = %s; want the form with an error", body)
			}
		})
	}
}

func TestCancelDeniesAccess(t *testing.T) {
	h := start(t, nil)
	form := h.authParams(oauth2.GenerateVerifier())
	form.Set("action", "deny")
	resp, err := h.http.PostForm(h.issuer+"/authorize", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if q := loc.Query(); q.Get("error") != "access_denied" || q.Get("state") != "state-123" || q.Has("code") {
		t.Errorf("Got(redirect query) = %v; want error=access_denied, state, no code", q)
	}
}

func TestToken(t *testing.T) {
	tests := []struct {
		name       string
		req        func(h *harness, code, verifier string) tokenRequest
		advance    time.Duration
		wantStatus int
		wantError  string
	}{
		{"client_secret_basic", func(h *harness, code, v string) tokenRequest {
			return tokenRequest{basicID: clientID, basicSecret: clientSecret, form: h.codeForm(code, v)}
		}, 0, http.StatusOK, ""},
		{"client_secret_post", func(h *harness, code, v string) tokenRequest {
			f := h.codeForm(code, v)
			f.Set("client_id", clientID)
			f.Set("client_secret", clientSecret)
			return tokenRequest{form: f}
		}, 0, http.StatusOK, ""},
		{"wrong secret", func(h *harness, code, v string) tokenRequest {
			return tokenRequest{basicID: clientID, basicSecret: "nope", form: h.codeForm(code, v)}
		}, 0, http.StatusUnauthorized, "invalid_client"},
		{"no client authentication", func(h *harness, code, v string) tokenRequest {
			f := h.codeForm(code, v)
			f.Set("client_id", clientID)
			return tokenRequest{form: f}
		}, 0, http.StatusUnauthorized, "invalid_client"},
		{"two authentication methods", func(h *harness, code, v string) tokenRequest {
			f := h.codeForm(code, v)
			f.Set("client_secret", clientSecret)
			return tokenRequest{basicID: clientID, basicSecret: clientSecret, form: f}
		}, 0, http.StatusBadRequest, "invalid_request"},
		{"code of another client", func(h *harness, code, v string) tokenRequest {
			return tokenRequest{basicID: "other", basicSecret: "other-secret", form: h.codeForm(code, v)}
		}, 0, http.StatusBadRequest, "invalid_grant"},
		{"wrong code_verifier", func(h *harness, code, _ string) tokenRequest {
			return tokenRequest{basicID: clientID, basicSecret: clientSecret, form: h.codeForm(code, oauth2.GenerateVerifier())}
		}, 0, http.StatusBadRequest, "invalid_grant"},
		{"no code_verifier", func(h *harness, code, _ string) tokenRequest {
			f := h.codeForm(code, "")
			f.Del("code_verifier")
			return tokenRequest{basicID: clientID, basicSecret: clientSecret, form: f}
		}, 0, http.StatusBadRequest, "invalid_grant"},
		{"wrong redirect_uri", func(h *harness, code, v string) tokenRequest {
			f := h.codeForm(code, v)
			f.Set("redirect_uri", h.redirectURI+"/x")
			return tokenRequest{basicID: clientID, basicSecret: clientSecret, form: f}
		}, 0, http.StatusBadRequest, "invalid_grant"},
		{"unknown code", func(h *harness, _, v string) tokenRequest {
			return tokenRequest{basicID: clientID, basicSecret: clientSecret, form: h.codeForm("made-up", v)}
		}, 0, http.StatusBadRequest, "invalid_grant"},
		{"expired code", func(h *harness, code, v string) tokenRequest {
			return tokenRequest{basicID: clientID, basicSecret: clientSecret, form: h.codeForm(code, v)}
		}, 61 * time.Second, http.StatusBadRequest, "invalid_grant"},
		{"wrong grant type", func(h *harness, code, v string) tokenRequest {
			f := h.codeForm(code, v)
			f.Set("grant_type", "password")
			return tokenRequest{basicID: clientID, basicSecret: clientSecret, form: f}
		}, 0, http.StatusBadRequest, "unsupported_grant_type"},
	}
	h := start(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifier := oauth2.GenerateVerifier()
			code := h.login(t, h.authParams(verifier), "dev@example.com")
			h.clock.Advance(tt.advance)
			status, body := h.token(t, tt.req(h, code, verifier))
			if status != tt.wantStatus {
				t.Fatalf("Got(status) = %d; want %d; body %v", status, tt.wantStatus, body)
			}
			if tt.wantError != "" {
				if body["error"] != tt.wantError {
					t.Errorf("Got(error) = %v; want %s", body["error"], tt.wantError)
				}
				if _, ok := body["access_token"]; ok {
					t.Errorf("Got(error response) has an access_token; want none")
				}
				return
			}
			if body["token_type"] != "Bearer" || body["access_token"] == "" || body["id_token"] == "" || body["expires_in"] != float64(300) {
				t.Errorf("Got(token response) = %v; want Bearer access_token, id_token, expires_in 300", body)
			}
		})
	}
}

// TestWrongVerifierUsesUpCode: a failed redemption burns the code, so the verifier cannot be
// guessed by retrying.
func TestWrongVerifierUsesUpCode(t *testing.T) {
	h := start(t, nil)
	verifier := oauth2.GenerateVerifier()
	code := h.login(t, h.authParams(verifier), "dev@example.com")
	basic := func(v string) tokenRequest {
		return tokenRequest{basicID: clientID, basicSecret: clientSecret, form: h.codeForm(code, v)}
	}
	if status, _ := h.token(t, basic(oauth2.GenerateVerifier())); status != http.StatusBadRequest {
		t.Fatalf("Got(wrong verifier status) = %d; want 400", status)
	}
	if status, body := h.token(t, basic(verifier)); status != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Errorf("Got(right verifier after a wrong one) = %d %v; want 400 invalid_grant", status, body)
	}
}

// TestReplayedCode: the second redemption gets invalid_grant and nothing else, and the access
// token from the first one stops working (RFC 6749 4.1.2).
func TestReplayedCode(t *testing.T) {
	h := start(t, nil)
	verifier := oauth2.GenerateVerifier()
	code := h.login(t, h.authParams(verifier), "dev@example.com")
	req := tokenRequest{basicID: clientID, basicSecret: clientSecret, form: h.codeForm(code, verifier)}
	status, first := h.token(t, req)
	if status != http.StatusOK {
		t.Fatalf("Got(first redemption) = %d %v; want 200", status, first)
	}
	access, _ := first["access_token"].(string)
	if status, info := h.userinfo(t, access); status != http.StatusOK || info["email"] != "dev@example.com" {
		t.Fatalf("Got(userinfo) = %d %v; want 200 with the email", status, info)
	}

	status, second := h.token(t, req)
	if status != http.StatusBadRequest || second["error"] != "invalid_grant" {
		t.Errorf("Got(replay) = %d %v; want 400 invalid_grant", status, second)
	}
	for k := range second {
		if k != "error" && k != "error_description" {
			t.Errorf("Got(replay response field %q); want only error and error_description", k)
		}
	}
	if status, _ := h.userinfo(t, access); status != http.StatusUnauthorized {
		t.Errorf("Got(userinfo after replay) = %d; want 401", status)
	}
}

func TestUserinfoRejectsBadToken(t *testing.T) {
	h := start(t, nil)
	for _, tok := range []string{"", "made-up"} {
		if status, _ := h.userinfo(t, tok); status != http.StatusUnauthorized {
			t.Errorf("Got(userinfo with %q) = %d; want 401", tok, status)
		}
	}
}

// TestIDToken verifies the ID token with go-oidc against the provider's own JWKS.
func TestIDToken(t *testing.T) {
	h := start(t, nil)
	ctx := context.Background()
	provider, err := oidc.NewProvider(ctx, h.issuer)
	if err != nil {
		t.Fatal(err)
	}
	verifier := provider.Verifier(&oidc.Config{ClientID: clientID, Now: h.clock.Now})
	idToken := func(email string) *oidc.IDToken {
		t.Helper()
		v := oauth2.GenerateVerifier()
		code := h.login(t, h.authParams(v), email)
		status, body := h.token(t, tokenRequest{basicID: clientID, basicSecret: clientSecret, form: h.codeForm(code, v)})
		if status != http.StatusOK {
			t.Fatalf("Got(token) = %d %v; want 200", status, body)
		}
		raw, _ := body["id_token"].(string)
		tok, err := verifier.Verify(ctx, raw)
		if err != nil {
			t.Fatalf("Got(Verify) = %v; want nil", err)
		}
		return tok
	}

	tok := idToken("Dev@Example.com")
	var claims struct {
		Email         string `json:"email"`
		EmailVerified bool   `json:"email_verified"`
		Name          string `json:"name"`
	}
	if err := tok.Claims(&claims); err != nil {
		t.Fatal(err)
	}
	if tok.Issuer != h.issuer || tok.Nonce != "nonce-456" || len(tok.Audience) != 1 || tok.Audience[0] != clientID {
		t.Errorf("Got(iss, nonce, aud) = %s, %s, %v; want %s, nonce-456, [%s]", tok.Issuer, tok.Nonce, tok.Audience, h.issuer, clientID)
	}
	if got := tok.Expiry.Sub(tok.IssuedAt); got != 5*time.Minute {
		t.Errorf("Got(exp - iat) = %v; want 5m", got)
	}
	if claims.Email != "Dev@Example.com" || !claims.EmailVerified || claims.Name != "Dev Eloper" {
		t.Errorf("Got(claims) = %+v; want the typed email, verified, name", claims)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(tok.Subject) {
		t.Errorf("Got(sub) = %q; want 32 hex digits", tok.Subject)
	}
	if again := idToken("dev@example.com"); again.Subject != tok.Subject {
		t.Errorf("Got(sub for lowercased email) = %s; want %s", again.Subject, tok.Subject)
	}
	if other := idToken("other@example.com"); other.Subject == tok.Subject {
		t.Errorf("Got(sub for another email) = %s; want a different subject", other.Subject)
	}
}

// TestMutateClaims: the hook sees the final claims and its changes are what gets signed.
func TestMutateClaims(t *testing.T) {
	h := start(t, func(c map[string]any) {
		if c["nonce"] != "nonce-456" || c["aud"] != clientID {
			c["test_error"] = "hook saw unexpected claims"
		}
		c["aud"] = "someone-else"
	})
	v := oauth2.GenerateVerifier()
	code := h.login(t, h.authParams(v), "dev@example.com")
	_, body := h.token(t, tokenRequest{basicID: clientID, basicSecret: clientSecret, form: h.codeForm(code, v)})
	raw, _ := body["id_token"].(string)
	jws, err := jose.ParseSigned(raw, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &claims); err != nil {
		t.Fatal(err)
	}
	if claims["aud"] != "someone-else" || claims["test_error"] != nil {
		t.Errorf("Got(claims) = %v; want aud someone-else and no test_error", claims)
	}
}
