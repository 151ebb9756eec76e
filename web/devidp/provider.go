// Package devidp is a small, real OpenID Connect provider for development: authorization code
// flow with mandatory PKCE (S256), signed ID tokens, discovery, JWKS and userinfo. It keeps
// everything in memory and lets anyone log in as any email address, so it must only run when no
// real issuer is configured, and it says so on its login page.
package devidp

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Lifetimes and bounds. The code lifetime follows RFC 6749 4.1.2 ("maximum of 10 minutes
// RECOMMENDED"); 60 s is plenty for a redirect.
const (
	codeTTL         = 60 * time.Second
	defaultTokenTTL = 5 * time.Minute
	// maxGrants bounds memory: a development provider has no reason to hold more.
	maxGrants    = 10000
	maxFormBytes = 64 << 10
	signingAlg   = jose.ES256
)

// hostRE limits redirect URI hosts to names, IPv4 and bracketed IPv6 with a port: the origin
// goes into the login page's CSP header.
var hostRE = regexp.MustCompile(`^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)

// ErrConfig is wrapped by every configuration error returned by New.
var ErrConfig = errors.New("invalid development identity provider configuration")

// Client is a registered relying party.
type Client struct {
	ID           string
	Secret       string
	RedirectURIs []string // compared exactly, as RFC 6749 3.1.2 and OIDC Core 3.1.2.1 require
}

// Config configures a Provider. Issuer, one client and its secret are required.
type Config struct {
	// Issuer is the provider's public URL, e.g. http://127.0.0.1:8080/dev-idp. Its path is the
	// prefix Handler serves under.
	Issuer   string
	Clients  []Client
	TokenTTL time.Duration    // ID and access token lifetime; default 5m
	Clock    func() time.Time // default time.Now
	// MutateClaims, when set, is applied to the ID token claims last, just before signing, so
	// tests can make the provider misbehave (wrong aud, nonce, iss, expired token).
	MutateClaims func(claims map[string]any)
	Logger       *slog.Logger // default discards
	// DefaultEmail and DefaultName prefill the login form.
	DefaultEmail string
	DefaultName  string
}

// Provider is an in-memory OpenID Connect provider. It is safe for concurrent use.
type Provider struct {
	cfg     Config
	prefix  string // path of the issuer URL, "" or "/dev-idp"
	clients map[string]Client
	key     *ecdsa.PrivateKey
	keyID   string
	signer  jose.Signer

	mu     sync.Mutex
	codes  map[string]*grant // by authorization code
	tokens map[string]*grant // by access token
}

// user is who logged in on the form.
type user struct {
	Subject, Email, Name string
}

// grant is one authorization: created by the login form, redeemed once at the token endpoint.
type grant struct {
	clientID      string
	redirectURI   string
	codeChallenge string
	nonce         string
	scope         string
	user          user
	authTime      time.Time
	codeExpiry    time.Time
	redeemed      bool   // a second redemption is a replay
	accessToken   string // issued on redemption, revoked on replay
	tokenExpiry   time.Time
}

// New checks cfg, applies defaults and generates a fresh signing key in memory.
func New(cfg Config) (*Provider, error) {
	iss, err := url.Parse(cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: issuer %q: %w", ErrConfig, cfg.Issuer, err)
	}
	if (iss.Scheme != "http" && iss.Scheme != "https") || iss.Host == "" || iss.RawQuery != "" ||
		iss.Fragment != "" || iss.User != nil || strings.HasSuffix(iss.Path, "/") {
		return nil, fmt.Errorf("%w: issuer %q must be an http(s) URL without query, fragment or trailing slash",
			ErrConfig, cfg.Issuer)
	}
	if len(cfg.Clients) == 0 {
		return nil, fmt.Errorf("%w: no clients", ErrConfig)
	}
	clients := make(map[string]Client, len(cfg.Clients))
	for _, c := range cfg.Clients {
		if c.ID == "" || c.Secret == "" {
			return nil, fmt.Errorf("%w: client %q: id and secret are required", ErrConfig, c.ID)
		}
		if _, dup := clients[c.ID]; dup {
			return nil, fmt.Errorf("%w: client %q registered twice", ErrConfig, c.ID)
		}
		if len(c.RedirectURIs) == 0 {
			return nil, fmt.Errorf("%w: client %q: no redirect URIs", ErrConfig, c.ID)
		}
		for _, ru := range c.RedirectURIs {
			u, err := url.Parse(ru)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !hostRE.MatchString(u.Host) || u.Fragment != "" {
				return nil, fmt.Errorf("%w: client %q: redirect URI %q must be an absolute http(s) URL without fragment",
					ErrConfig, c.ID, ru)
			}
		}
		c.RedirectURIs = append([]string(nil), c.RedirectURIs...)
		clients[c.ID] = c
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = defaultTokenTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	jwk := jose.JSONWebKey{Key: &key.PublicKey}
	thumb, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("signing key thumbprint: %w", err)
	}
	keyID := base64.RawURLEncoding.EncodeToString(thumb)
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: signingAlg, Key: jose.JSONWebKey{Key: key, KeyID: keyID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("create signer: %w", err)
	}
	return &Provider{
		cfg:     cfg,
		prefix:  iss.Path,
		clients: clients,
		key:     key,
		keyID:   keyID,
		signer:  signer,
		codes:   make(map[string]*grant),
		tokens:  make(map[string]*grant),
	}, nil
}

// Issuer returns the issuer URL exactly as advertised in discovery and ID tokens.
func (p *Provider) Issuer() string { return p.cfg.Issuer }

// Handler serves the provider's endpoints at their full paths under the issuer's path (for
// issuer http://h/dev-idp: /dev-idp/.well-known/openid-configuration, /dev-idp/authorize, ...).
// Mount it on that prefix WITHOUT http.StripPrefix, e.g. Echo: e.Any("/dev-idp/*",
// echo.WrapHandler(p.Handler())).
func (p *Provider) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+p.prefix+"/.well-known/openid-configuration", p.serveDiscovery)
	mux.HandleFunc("GET "+p.prefix+"/jwks", p.serveJWKS)
	mux.HandleFunc("GET "+p.prefix+"/authorize", p.serveAuthorizePage)
	mux.HandleFunc("POST "+p.prefix+"/authorize", p.serveAuthorizeSubmit)
	mux.HandleFunc("POST "+p.prefix+"/token", p.serveToken)
	mux.HandleFunc("GET "+p.prefix+"/userinfo", p.serveUserinfo)
	mux.HandleFunc("POST "+p.prefix+"/userinfo", p.serveUserinfo)
	return mux
}

func (p *Provider) endpoint(name string) string { return p.cfg.Issuer + "/" + name }

func (p *Provider) serveDiscovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                p.cfg.Issuer,
		"authorization_endpoint":                p.endpoint("authorize"),
		"token_endpoint":                        p.endpoint("token"),
		"jwks_uri":                              p.endpoint("jwks"),
		"userinfo_endpoint":                     p.endpoint("userinfo"),
		"response_types_supported":              []string{"code"},
		"response_modes_supported":              []string{"query"},
		"grant_types_supported":                 []string{"authorization_code"},
		"code_challenge_methods_supported":      []string{"S256"},
		"id_token_signing_alg_values_supported": []string{string(signingAlg)},
		"subject_types_supported":               []string{"public"},
		"scopes_supported":                      []string{"openid", "email", "profile"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
		"claims_supported": []string{"iss", "sub", "aud", "exp", "iat", "auth_time", "nonce",
			"email", "email_verified", "name"},
	})
}

func (p *Provider) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{
		Key:       &p.key.PublicKey,
		KeyID:     p.keyID,
		Algorithm: string(signingAlg),
		Use:       "sig",
	}}})
}

// subject derives a stable, opaque subject from the email address, so the same developer gets
// the same account across restarts of the provider.
func subject(email string) string {
	sum := sha256.Sum256([]byte("stockade-dev-idp\x00" + strings.ToLower(email)))
	return hex.EncodeToString(sum[:16])
}

// randomToken returns 32 random bytes, base64url-encoded: codes and access tokens.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// pruneLocked drops grants that can no longer be used or replayed. Caller holds p.mu.
func (p *Provider) pruneLocked(now time.Time) {
	for code, g := range p.codes {
		// A redeemed grant is kept until its access token expires, so a replay can still
		// revoke that token (RFC 6749 4.1.2).
		if now.After(g.codeExpiry) && (!g.redeemed || now.After(g.tokenExpiry)) {
			delete(p.codes, code)
		}
	}
	for tok, g := range p.tokens {
		if now.After(g.tokenExpiry) {
			delete(p.tokens, tok)
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode response", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
