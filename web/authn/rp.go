// Package authn is the OpenID Connect relying party: it sends browsers to the issuer
// (authorization code flow with PKCE S256, state and nonce) and turns the callback into a
// verified Identity. It knows nothing of users or sessions; the caller maps the Identity to an
// account and starts a session.
package authn

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// ErrLogin is wrapped by every error Finish returns: the login attempt failed and the user
// should start again. The rest of the message is a reason safe to log.
var ErrLogin = errors.New("login failed")

// ErrDiscovery is wrapped by New when the issuer cannot be discovered or its metadata is unusable.
var ErrDiscovery = errors.New("discovery")

// ErrConfig is wrapped by New when Config itself is invalid.
var ErrConfig = errors.New("invalid oidc configuration")

// Reasons, wrapped next to ErrLogin so tests and logs can tell failures apart.
var (
	errFlowCookie = errors.New("login flow cookie")
	errState      = errors.New("state mismatch")
	errProvider   = errors.New("provider returned an error")
	errCallback   = errors.New("malformed callback")
	errExchange   = errors.New("code exchange")
	errIDToken    = errors.New("id token rejected")
	errNonce      = errors.New("nonce mismatch")
)

const (
	defaultHTTPTimeout = 30 * time.Second
	maxErrorText       = 300
)

// Config configures an RP.
type Config struct {
	Issuer, ClientID, ClientSecret, RedirectURL string
	Scopes                                      []string     // default openid, email, profile
	HTTPClient                                  *http.Client // discovery, JWKS and token calls; default has a 30 s timeout
	CookieKey                                   []byte       // at least 32 bytes: HMAC key for the login flow cookie
	SecureCookies                               bool         // set when the public URL is https
	Clock                                       func() time.Time
}

// Identity is who the issuer says logged in.
type Identity struct {
	Issuer, Subject, Email, Name string
	EmailVerified                bool
}

// RP is a relying party for one issuer and client. It is safe for concurrent use.
type RP struct {
	cfg      Config
	client   *http.Client
	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
}

// New discovers the issuer. Every error names the issuer and what failed, because it is what an
// operator sees at startup when STOCKADE_OIDC_ISSUER is wrong.
func New(ctx context.Context, cfg Config) (*RP, error) {
	switch {
	case cfg.Issuer == "":
		return nil, fmt.Errorf("%w: issuer is required", ErrConfig)
	case cfg.ClientID == "":
		return nil, fmt.Errorf("%w: oidc issuer %q: client id is required", ErrConfig, cfg.Issuer)
	case cfg.RedirectURL == "":
		return nil, fmt.Errorf("%w: oidc issuer %q: redirect URL is required", ErrConfig, cfg.Issuer)
	case len(cfg.CookieKey) < 32:
		return nil, fmt.Errorf("%w: cookie key must be at least 32 bytes, got %d", ErrConfig, len(cfg.CookieKey))
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = []string{oidc.ScopeOpenID, "email", "profile"}
	} else if !slices.Contains(cfg.Scopes, oidc.ScopeOpenID) {
		cfg.Scopes = append([]string{oidc.ScopeOpenID}, cfg.Scopes...)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	cfg.CookieKey = slices.Clone(cfg.CookieKey)
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: defaultHTTPTimeout}
	}

	provider, err := oidc.NewProvider(oidc.ClientContext(ctx, client), cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidc issuer %q: %w: %w", cfg.Issuer, ErrDiscovery, shortError{err})
	}
	var meta struct {
		AuthURL     string   `json:"authorization_endpoint"`
		TokenURL    string   `json:"token_endpoint"`
		JWKSURL     string   `json:"jwks_uri"`
		PKCE        []string `json:"code_challenge_methods_supported"`
		AuthMethods []string `json:"token_endpoint_auth_methods_supported"`
	}
	if err := provider.Claims(&meta); err != nil {
		return nil, fmt.Errorf("oidc issuer %q: %w: decode metadata: %w", cfg.Issuer, ErrDiscovery, err)
	}
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"authorization_endpoint", meta.AuthURL}, {"token_endpoint", meta.TokenURL}, {"jwks_uri", meta.JWKSURL},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("oidc issuer %q: %w: metadata lacks %s", cfg.Issuer, ErrDiscovery, strings.Join(missing, ", "))
	}
	// Providers that say nothing about PKCE usually support it; one that lists methods without
	// S256 would ignore our challenge, and we refuse to run without it.
	if len(meta.PKCE) > 0 && !slices.Contains(meta.PKCE, "S256") {
		return nil, fmt.Errorf("oidc issuer %q: %w: PKCE S256 not supported (advertises %v)", cfg.Issuer, ErrDiscovery, meta.PKCE)
	}

	endpoint := provider.Endpoint()
	// An explicit style: auto-detection retries a failed exchange with the other style, which
	// redeems the one-time code twice.
	endpoint.AuthStyle = oauth2.AuthStyleInHeader
	if len(meta.AuthMethods) > 0 && !slices.Contains(meta.AuthMethods, "client_secret_basic") &&
		slices.Contains(meta.AuthMethods, "client_secret_post") {
		endpoint.AuthStyle = oauth2.AuthStyleInParams
	}
	return &RP{
		cfg:    cfg,
		client: client,
		oauth: oauth2.Config{
			ClientID:     cfg.ClientID,
			ClientSecret: cfg.ClientSecret,
			RedirectURL:  cfg.RedirectURL,
			Endpoint:     endpoint,
			Scopes:       cfg.Scopes,
		},
		// The key set behind this verifier fetches JWKS with the client given to discovery.
		verifier: provider.Verifier(&oidc.Config{ClientID: cfg.ClientID, Now: cfg.Clock}),
	}, nil
}

// Issuer returns the configured issuer URL.
func (rp *RP) Issuer() string { return rp.cfg.Issuer }

// Begin starts a login: it stores state, nonce, PKCE verifier and where to go afterwards in the
// signed flow cookie and returns the issuer URL to redirect the browser to. returnTo must be a
// local path; anything else becomes "/".
func (rp *RP) Begin(w http.ResponseWriter, r *http.Request, returnTo string) (string, error) {
	f := flow{
		State:    rand.Text(),
		Nonce:    rand.Text(),
		Verifier: oauth2.GenerateVerifier(),
		ReturnTo: SafeReturnTo(returnTo),
		Expires:  rp.cfg.Clock().Add(flowTTL).Unix(),
	}
	value, err := sealFlow(rp.cfg.CookieKey, f)
	if err != nil {
		return "", fmt.Errorf("begin login: %w", err)
	}
	http.SetCookie(w, rp.flowCookie(value, int(flowTTL/time.Second)))
	return rp.oauth.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)), nil
}

// Finish completes a login on the redirect URL's handler. It clears the flow cookie whatever
// happens; every error wraps ErrLogin and never contains a code or token.
func (rp *RP) Finish(w http.ResponseWriter, r *http.Request) (Identity, string, error) {
	f, err := rp.readFlow(r)
	http.SetCookie(w, rp.flowCookie("", -1))
	if err != nil {
		return Identity{}, "", fmt.Errorf("%w: %w", ErrLogin, err)
	}
	q := r.URL.Query()
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(f.State)) != 1 {
		return Identity{}, "", fmt.Errorf("%w: %w", ErrLogin, errState)
	}
	if e := q.Get("error"); e != "" {
		return Identity{}, "", fmt.Errorf("%w: %w: %s: %s", ErrLogin, errProvider,
			safeText(e), safeText(q.Get("error_description")))
	}
	// RFC 9207: when the provider names itself in the response, it must be ours (mix-up defence).
	if iss := q.Get("iss"); iss != "" && iss != rp.cfg.Issuer {
		return Identity{}, "", fmt.Errorf("%w: %w: iss parameter %q is not the configured issuer", ErrLogin, errCallback, safeText(iss))
	}
	code := q.Get("code")
	if code == "" {
		return Identity{}, "", fmt.Errorf("%w: %w: no code", ErrLogin, errCallback)
	}

	ctx := oidc.ClientContext(r.Context(), rp.client)
	tok, err := rp.oauth.Exchange(ctx, code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return Identity{}, "", fmt.Errorf("%w: %w: %s", ErrLogin, errExchange, exchangeReason(err))
	}
	raw, ok := tok.Extra("id_token").(string)
	if !ok || raw == "" {
		return Identity{}, "", fmt.Errorf("%w: %w: token response has no id_token", ErrLogin, errIDToken)
	}
	idt, err := rp.verifier.Verify(ctx, raw)
	if err != nil {
		// go-oidc's messages name the failed check (issuer, audience, expiry, signature), not the token.
		return Identity{}, "", fmt.Errorf("%w: %w: %w", ErrLogin, errIDToken, err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.Nonce)) != 1 {
		return Identity{}, "", fmt.Errorf("%w: %w", ErrLogin, errNonce)
	}
	if idt.Subject == "" {
		return Identity{}, "", fmt.Errorf("%w: %w: no subject", ErrLogin, errIDToken)
	}
	var claims struct {
		Email         string   `json:"email"`
		EmailVerified flexBool `json:"email_verified"`
		Name          string   `json:"name"`
	}
	if err := idt.Claims(&claims); err != nil {
		return Identity{}, "", fmt.Errorf("%w: %w: decode claims: %w", ErrLogin, errIDToken, err)
	}
	return Identity{
		Issuer:        idt.Issuer,
		Subject:       idt.Subject,
		Email:         claims.Email,
		Name:          claims.Name,
		EmailVerified: bool(claims.EmailVerified),
	}, f.ReturnTo, nil
}

func (rp *RP) flowCookie(value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name:     flowCookieName,
		Value:    value,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   rp.cfg.SecureCookies,
		// Lax, not Strict: the callback is a top-level navigation coming from the issuer's site.
		SameSite: http.SameSiteLaxMode,
	}
}

// exchangeReason describes a failed token request without echoing the response body.
func exchangeReason(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		if re.ErrorCode != "" {
			return fmt.Sprintf("token endpoint answered %s (HTTP %d)", safeText(re.ErrorCode), status)
		}
		return fmt.Sprintf("token endpoint answered HTTP %d", status)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprintf("token endpoint unreachable: %s", safeText(ue.Error()))
	}
	return safeText(err.Error())
}

// safeText keeps provider-supplied text printable and short before it goes into a log line.
func safeText(s string) string {
	var b strings.Builder
	for _, r := range strings.TrimSpace(s) {
		if b.Len() >= maxErrorText {
			b.WriteString("...")
			break
		}
		switch {
		case r < 0x20 || r == 0x7f:
			r = ' '
		case r > 0x7e:
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// shortError caps an error's message: a failed discovery quotes the whole response body.
type shortError struct{ err error }

func (e shortError) Error() string { return safeText(e.err.Error()) }
func (e shortError) Unwrap() error { return e.err }

// flexBool accepts true and "true": some providers send email_verified as a string.
type flexBool bool

func (b *flexBool) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch t := v.(type) {
	case bool:
		*b = flexBool(t)
	case string:
		*b = flexBool(t == "true")
	default:
		*b = false
	}
	return nil
}
