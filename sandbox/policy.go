package sandbox

import (
	"context"
	"fmt"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
)

// Policies gives the tenant policy a sandbox starts under. *policy.Store
// implements it.
type Policies interface {
	Current(ctx context.Context, tenantID string) (policy.Version, error)
}

// withPolicy is cfg with the policy's defaults for memory and lifetime.
func (c Config) withPolicy(p policy.Doc) Config {
	c.DefaultMemoryMiB = p.Resources.DefaultMemoryMiB
	c.DefaultTimeoutSeconds = p.Lifetime.DefaultTimeoutSeconds
	return c
}

// checkPolicy refuses limits above what the tenant policy allows, naming
// the field, the bound and the policy version.
func (l limits) checkPolicy(p policy.Version) error {
	r, lt := p.Doc.Resources, p.Doc.Lifetime
	over := func(field string, got, bound int, setting string) error {
		return errdefs.Invalid(field, "policy", fmt.Sprintf("must be at most %d: the tenant policy (version %d, %s) allows %d; asked %d",
			bound, p.Version, setting, bound, got))
	}
	switch {
	case l.VCPUs > r.MaxVCPUs:
		return over("vcpus", l.VCPUs, r.MaxVCPUs, "resources.max_vcpus")
	case l.MemoryMiB > r.MaxMemoryMiB:
		return over("memory_mib", l.MemoryMiB, r.MaxMemoryMiB, "resources.max_memory_mib")
	case l.TimeoutSeconds > lt.MaxTimeoutSeconds:
		return over("timeout_seconds", l.TimeoutSeconds, lt.MaxTimeoutSeconds, "lifetime.max_timeout_seconds")
	case lt.MaxIdleTimeoutSeconds > 0 && l.IdleTimeoutSeconds > lt.MaxIdleTimeoutSeconds:
		return over("idle_timeout_seconds", l.IdleTimeoutSeconds, lt.MaxIdleTimeoutSeconds, "lifetime.max_idle_timeout_seconds")
	}
	return nil
}
