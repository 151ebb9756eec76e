package secrets

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"slices"
	"strings"
)

// PlaceholderPrefix starts every placeholder, so logs and tests can find them.
const PlaceholderPrefix = "stockade-placeholder-"

var placeholderEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Placeholder is what the sandbox sees instead of the secret called name:
// stable for the sandbox and secret, so a process restart sees the same
// text, and meaningless elsewhere: it is a keyed hash (HMAC-SHA256 under a
// key derived from the root key) of the tenant, sandbox and name, carrying
// nothing of the value, and another sandbox's placeholder is swapped by
// nothing.
func (s *Store) Placeholder(tenantID, sandboxID, name string) string {
	m := hmac.New(sha256.New, s.phKey)
	m.Write([]byte(tenantID + "\x00" + sandboxID + "\x00" + name))
	return PlaceholderPrefix + name + "-" + placeholderEncoding.EncodeToString(m.Sum(nil)[:20])
}

// Env returns NAME=placeholder for the sandbox, one per live secret of the
// tenant among names (nil names means every live secret), sorted by name.
// Names with no live secret are left out: a policy may grant a secret that
// an admin has not created yet.
func (s *Store) Env(ctx context.Context, tenantID, sandboxID string, names []string) ([]string, error) {
	rows, err := s.liveRows(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("secret placeholders for sandbox %s: %w", sandboxID, err)
	}
	var out []string
	for i := range rows {
		if names != nil && !slices.Contains(names, rows[i].Name) {
			continue
		}
		out = append(out, rows[i].Name+"="+s.Placeholder(tenantID, sandboxID, rows[i].Name))
	}
	return out, nil
}

// ForHost returns what the gateway swaps in traffic from the sandbox to
// host (a name, with or without a port): a replacer of each placeholder of
// the sandbox for the value of its secret, for every live secret scoped to
// host. ok is false when no secret is scoped to host: the gateway then
// passes the connection through untouched (no TLS termination). Revocation
// and expiry apply from the next call.
func (s *Store) ForHost(ctx context.Context, tenantID, sandboxID, host string) (*strings.Replacer, bool, error) {
	host = hostOnly(host)
	rows, err := s.liveRows(ctx, tenantID)
	if err != nil {
		return nil, false, fmt.Errorf("secrets for %s: %w", host, err)
	}
	var pairs []string
	for i := range rows {
		if !slices.ContainsFunc(rows[i].Hosts, func(p string) bool { return MatchHost(p, host) }) {
			continue
		}
		v, err := s.seal.open(rows[i].Ciphertext, secretAD(tenantID, rows[i].ID))
		if err != nil {
			return nil, false, fmt.Errorf("secret %s for %s: %w", rows[i].Name, host, err)
		}
		pairs = append(pairs, s.Placeholder(tenantID, sandboxID, rows[i].Name), string(v))
	}
	if len(pairs) == 0 {
		return nil, false, nil
	}
	return strings.NewReplacer(pairs...), true, nil
}

// Scoped reports whether any live secret of the tenant is scoped to host,
// without decrypting anything: the gateway's cheap test of whether to
// terminate TLS.
func (s *Store) Scoped(ctx context.Context, tenantID, host string) (bool, error) {
	host = hostOnly(host)
	var rows []row
	if err := s.db.WithContext(ctx).Select("hosts").Where("tenant_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
		tenantID, s.now()).Find(&rows).Error; err != nil {
		return false, fmt.Errorf("secrets scoped to %s: %w", host, err)
	}
	for i := range rows {
		if slices.ContainsFunc(rows[i].Hosts, func(p string) bool { return MatchHost(p, host) }) {
			return true, nil
		}
	}
	return false, nil
}

// hostOnly drops a port and brackets, lowercases and drops a trailing dot.
func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") && strings.Count(h, ":") == 1 {
		h = h[:i]
	}
	if strings.HasPrefix(h, "[") {
		if j := strings.IndexByte(h, ']'); j > 0 {
			h = h[1:j]
		}
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}
