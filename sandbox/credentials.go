package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/stockade-dev/stockade/tenants/policy"
)

// Credentials gives a sandbox placeholders for the tenant's secrets and the
// certificate authority its egress gateway terminates TLS with
// (tenants/secrets.Store). Real values never reach the sandbox.
type Credentials interface {
	// Env returns NAME=placeholder for the live secrets among names (nil:
	// all of them).
	Env(ctx context.Context, tenantID, sandboxID string, names []string) ([]string, error)
	// CAPEM returns the tenant's CA certificate, PEM.
	CAPEM(ctx context.Context, tenantID string) (string, error)
}

// grantedSecrets is the policy's list of secrets exposed to sandboxes
// (never nil with a policy: an empty list grants none); without policies,
// nil: every live secret.
func grantedSecrets(havePolicy bool, pol policy.Version) []string {
	if !havePolicy {
		return nil
	}
	if pol.Doc.Credentials.Secrets == nil {
		return []string{}
	}
	return pol.Doc.Credentials.Secrets
}

// credentials returns the placeholder environment of a new sandbox
// (NAME=placeholder for each granted live secret) and the CA it must trust.
// A variable the caller set by name wins over a placeholder of that name.
// No Credentials configured: neither.
func (s *Service) credentials(ctx context.Context, tenantID, sandboxID string, callerEnv map[string]string, granted []string) ([]string, string, error) {
	if s.cfg.Credentials == nil {
		return nil, "", nil
	}
	all, err := s.cfg.Credentials.Env(ctx, tenantID, sandboxID, granted)
	if err != nil {
		return nil, "", fmt.Errorf("create sandbox: credentials: %w", err)
	}
	var env []string
	for _, kv := range all {
		name, _, _ := strings.Cut(kv, "=")
		if _, set := callerEnv[name]; !set {
			env = append(env, kv)
		}
	}
	ca, err := s.cfg.Credentials.CAPEM(ctx, tenantID)
	if err != nil {
		return nil, "", fmt.Errorf("create sandbox: certificate authority: %w", err)
	}
	return env, ca, nil
}

// withCredentialKeys adds the names of the placeholder variables to the
// recorded environment names, sorted.
func withCredentialKeys(keys, credEnv []string) []string {
	for _, kv := range credEnv {
		name, _, _ := strings.Cut(kv, "=")
		keys = append(keys, name)
	}
	slices.Sort(keys)
	return keys
}
