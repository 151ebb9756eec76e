package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/authn"
	"github.com/stockade-dev/stockade/web/devidp"
)

// identity is the sign-in side: the OIDC relying party, and with no issuer
// configured the development provider it discovers once listening.
type identity struct {
	rp           *lateRP
	rpCfg        authn.Config
	dev          *devidp.Provider // nil with a real issuer
	providerName string
}

// newIdentity sets up the relying party. With a real issuer it discovers
// it now and fails with a clear message if it cannot; with the development
// provider, connect discovers it once the server listens.
func newIdentity(ctx context.Context, cfg Config, secure bool, mutate func(map[string]any), clock func() time.Time, log *slog.Logger) (*identity, error) {
	id := &identity{rp: &lateRP{}, providerName: cfg.OIDCIssuer}
	id.rpCfg = authn.Config{
		Issuer: cfg.OIDCIssuer, ClientID: cfg.OIDCClientID, ClientSecret: cfg.OIDCClientSecret,
		RedirectURL: cfg.PublicURL + "/auth/callback", CookieKey: web.Derive(cfg.RootKey, "login-flow"),
		SecureCookies: secure, Clock: clock,
	}
	if cfg.OIDCIssuer != "" {
		r, err := authn.New(ctx, id.rpCfg)
		if err != nil {
			return nil, fmt.Errorf("identity provider: %w", err)
		}
		id.rp.set(r)
		return id, nil
	}
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	id.rpCfg.Issuer = cfg.PublicURL + web.DevIdPPath
	id.rpCfg.ClientID, id.rpCfg.ClientSecret = "stockade", hex.EncodeToString(secret)
	dev, err := devidp.New(devidp.Config{
		Issuer:       id.rpCfg.Issuer,
		Clients:      []devidp.Client{{ID: id.rpCfg.ClientID, Secret: id.rpCfg.ClientSecret, RedirectURIs: []string{id.rpCfg.RedirectURL}}},
		Logger:       log,
		MutateClaims: mutate,
		Clock:        clock,
	})
	if err != nil {
		return nil, err
	}
	id.dev, id.providerName = dev, "development identity provider"
	log.Warn("development identity provider active: anyone who can reach this server can sign in as any email; set STOCKADE_OIDC_ISSUER for real use",
		"issuer", id.rpCfg.Issuer)
	return id, nil
}

// connect discovers the embedded development provider over HTTP, once
// this server is listening. It is a no-op with a real issuer.
func (id *identity) connect(ctx context.Context) error {
	if id == nil || id.dev == nil {
		return nil
	}
	var last error
	for i := 0; i < 50; i++ {
		r, err := authn.New(ctx, id.rpCfg)
		if err == nil {
			id.rp.set(r)
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("development identity provider: %w", last)
}

// lateRP is the relying party as the login handlers see it
// (handlers.Identity), set once discovery has succeeded. Until then logins
// answer "not ready" (and /readyz says so).
type lateRP struct{ p atomic.Pointer[authn.RP] }

var _ handlers.Identity = (*lateRP)(nil)

func (l *lateRP) set(r *authn.RP) { l.p.Store(r) }
func (l *lateRP) ready() bool     { return l.p.Load() != nil }

var errNotReady = errors.New("identity provider not ready yet")

func (l *lateRP) Begin(w http.ResponseWriter, r *http.Request, returnTo string) (string, error) {
	if p := l.p.Load(); p != nil {
		return p.Begin(w, r, returnTo)
	}
	return "", errNotReady
}

func (l *lateRP) Finish(w http.ResponseWriter, r *http.Request) (handlers.LoginIdentity, string, error) {
	p := l.p.Load()
	if p == nil {
		return handlers.LoginIdentity{}, "", errNotReady
	}
	id, returnTo, err := p.Finish(w, r)
	return handlers.LoginIdentity{Issuer: id.Issuer, Subject: id.Subject, Email: id.Email, Name: id.Name,
		EmailVerified: id.EmailVerified}, returnTo, err
}

func (l *lateRP) Issuer() string {
	if p := l.p.Load(); p != nil {
		return p.Issuer()
	}
	return ""
}

// sortedLower is emails lowercased, trimmed, deduplicated and sorted.
func sortedLower(emails []string) []string {
	seen := map[string]bool{}
	out := make([]string, 0, len(emails))
	for _, e := range emails {
		if e = strings.ToLower(strings.TrimSpace(e)); e != "" && !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	sort.Strings(out)
	return out
}
