// Package egress is the host egress gateway: every connection a sandbox
// makes to its proxy listener arrives here (over the VM's agent session),
// speaking the HTTP proxy protocol (CONNECT, or a plain request with an
// absolute URL). The gateway decides by the tenant's policy (domains with
// wildcards, ports, default deny), resolves the name itself, refuses
// the addresses of the shared blocklist (tenants/netguard: private,
// loopback, link-local, CGNAT, metadata, IPv4-embedding IPv6 forms, and
// any literal with a zone) unless an operator range allows them, dials the
// address it checked (no second resolution: no DNS rebinding), logs every decision in egress_events and
// counts bytes per sandbox. For hosts a tenant secret is scoped to, it
// terminates TLS with the tenant's CA and swaps placeholders for the secret.
package egress

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Defaults of Rules.Default.
const (
	DefaultDeny  = "deny"
	DefaultAllow = "allow"
)

// Rules are a tenant's egress rules: Deny wins over Allow; a host no rule
// names gets Default (anything but "allow" denies).
type Rules struct {
	Default string
	Allow   []Rule
	Deny    []Rule
}

// Rule names a host ("api.github.com") or a wildcard ("*.example.com": any
// subdomain, not the apex) and the ports it covers (none: every port).
type Rule struct {
	Domain string
	Ports  []int
}

func (r Rule) String() string {
	if len(r.Ports) == 0 {
		return r.Domain
	}
	ps := make([]string, len(r.Ports))
	for i, p := range r.Ports {
		ps[i] = fmt.Sprint(p)
	}
	return r.Domain + ":" + strings.Join(ps, ",")
}

// matches reports whether r covers host:port; host is lower case without
// a trailing dot.
func (r Rule) matches(host string, port int) bool {
	if len(r.Ports) > 0 && !slices.Contains(r.Ports, port) {
		return false
	}
	d := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(r.Domain)), ".")
	if rest, ok := strings.CutPrefix(d, "*."); ok {
		return strings.HasSuffix(host, "."+rest)
	}
	return d == host
}

// Decision is what the rules say about one destination.
type Decision struct {
	Allowed bool
	// Rule names what decided: "deny api.evil.com", "allow *.github.com:443",
	// "default deny".
	Rule string
}

// Decide applies the rules to host:port.
func (rs Rules) Decide(host string, port int) Decision {
	host = normalizeHost(host)
	for _, r := range rs.Deny {
		if r.matches(host, port) {
			return Decision{Allowed: false, Rule: "deny " + r.String()}
		}
	}
	for _, r := range rs.Allow {
		if r.matches(host, port) {
			return Decision{Allowed: true, Rule: "allow " + r.String()}
		}
	}
	if rs.Default == DefaultAllow {
		return Decision{Allowed: true, Rule: "default allow"}
	}
	return Decision{Allowed: false, Rule: "default deny"}
}

func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}

// Policies gives a tenant's current egress rules and the policy version
// they come from.
type Policies interface {
	Egress(ctx context.Context, tenantID string) (Rules, int, error)
}

// PoliciesFunc adapts a function to Policies (the composition root wires
// the tenant policy store through it).
type PoliciesFunc func(ctx context.Context, tenantID string) (Rules, int, error)

// Egress calls f.
func (f PoliciesFunc) Egress(ctx context.Context, tenantID string) (Rules, int, error) {
	return f(ctx, tenantID)
}

// ruleCache keeps each tenant's rules for at most ttl: a policy change
// reaches running sandboxes within ttl.
type ruleCache struct {
	src   Policies
	ttl   time.Duration
	clock clockwork.Clock

	mu sync.Mutex
	m  map[string]cachedRules
}

type cachedRules struct {
	rules   Rules
	version int
	at      time.Time
}

func (c *ruleCache) get(ctx context.Context, tenantID string) (Rules, int, error) {
	now := c.clock.Now()
	c.mu.Lock()
	e, ok := c.m[tenantID]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.ttl {
		return e.rules, e.version, nil
	}
	rules, v, err := c.src.Egress(ctx, tenantID)
	if err != nil {
		return Rules{}, 0, fmt.Errorf("egress rules of tenant %s: %w", tenantID, err)
	}
	c.mu.Lock()
	c.m[tenantID] = cachedRules{rules: rules, version: v, at: now}
	c.mu.Unlock()
	return rules, v, nil
}
