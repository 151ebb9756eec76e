package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/policy"
)

// CreateOptions are what one tenant's create may ask for now: the
// templates, what a spec that names nothing gets, and the bounds a spec
// must keep (the tenant policy's within the size of the tenant's VMs and
// the service's own). Create decides from the same figures.
type CreateOptions struct {
	Templates []image.Template
	// Defaults is what a spec naming no template, vCPUs, memory or
	// lifetime gets: the policy's default memory and lifetime (memory at
	// most what the tenant's VMs hold).
	Defaults Spec
	// Bounds; 0 where nothing bounds it (no VM pools, no policy).
	MaxVCPUs, MaxMemoryMiB int
	MaxTimeoutSeconds      int
	// MaxIdleTimeoutSeconds is the policy's bound on the idle timeout; 0:
	// up to the lifetime.
	MaxIdleTimeoutSeconds int
	// PolicyVersion is the tenant policy version they come from (0: the
	// defaults, or no policy).
	PolicyVersion int
	// Unavailable says why a create cannot succeed now (no VM pools, no
	// template built, a broken image); nil when it may.
	Unavailable error
}

// loadTemplates reads the image's templates once, at New. No image built
// is no templates; a manifest that cannot be read, or files changed since
// the build, is an error that every create and the readiness check report.
func loadTemplates(dataDir string) ([]image.Template, error) {
	m, err := image.Load(dataDir)
	switch {
	case errors.Is(err, image.ErrNotBuilt):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%w: sandbox templates: %w (rebuild with `stockade image build`, then restart)", vmpool.ErrUnavailable, err)
	}
	return m.Templates, nil
}

// Templates returns the templates sandboxes can start from, as loaded at
// start (none when no image is built or it is broken: TemplatesAvailable).
func (s *Service) Templates() []image.Template { return s.templates }

// TemplatesAvailable is nil when the image's templates loaded at start (or
// none is built: creates then say so), else why they did not: for the
// readiness check.
func (s *Service) TemplatesAvailable() error { return s.templatesErr }

// basis is what a tenant's creates are decided from: the service's config
// with the policy's defaults, the policy, and the size of the tenant's VMs.
type basis struct {
	cfg       Config
	pol       policy.Version
	hasPolicy bool
	pool      vmpool.Pool
	hasPool   bool
}

func (s *Service) basis(ctx context.Context, tenantID string) (basis, error) {
	b := basis{cfg: s.cfg}
	if s.vms != nil {
		pool, err := s.vms.Pool(ctx, tenantID)
		if err != nil {
			return basis{}, err
		}
		b.pool, b.hasPool = pool, true
	}
	if s.cfg.Policies != nil {
		pol, err := s.cfg.Policies.Current(ctx, tenantID)
		if err != nil {
			return basis{}, fmt.Errorf("read the policy of tenant %s: %w", tenantID, err)
		}
		b.pol, b.hasPolicy, b.cfg = pol, true, b.cfg.withPolicy(pol.Doc)
	}
	return b, nil
}

// createUnavailable says, for people, why no create can succeed now, or
// nil. (Create itself answers each case with its own error.)
func (s *Service) createUnavailable() error {
	switch {
	case s.vms == nil:
		return errors.New("this server runs without VM pools")
	case s.templatesErr != nil:
		return s.templatesErr
	case len(s.templates) == 0:
		return errors.New("no sandbox templates are built: run `stockade image build`")
	}
	return nil
}

// CreateOptions says what a create of the tenant may ask for now and what
// it gets when it asks for nothing (the create form shows them).
func (s *Service) CreateOptions(ctx context.Context, tenantID string) (CreateOptions, error) {
	b, err := s.basis(ctx, tenantID)
	if err != nil {
		return CreateOptions{}, fmt.Errorf("create options: %w", err)
	}
	tpls, err := s.withTenantTemplates(ctx, tenantID, s.templates) // tenant_templates.go
	if err != nil {
		return CreateOptions{}, fmt.Errorf("create options: %w", err)
	}
	o := CreateOptions{Templates: tpls, Defaults: Spec{}.withDefaults(b.cfg, s.templates, b.pool, b.hasPool),
		MaxTimeoutSeconds: MaxTimeoutSeconds, PolicyVersion: b.pol.Version, Unavailable: s.createUnavailable()}
	if b.hasPool {
		o.MaxVCPUs, o.MaxMemoryMiB = b.pool.VCPUs, max(b.pool.MemoryMiB-b.cfg.GuestReserveMiB, 0)
	}
	if b.hasPolicy {
		r, lt := b.pol.Doc.Resources, b.pol.Doc.Lifetime
		o.MaxVCPUs, o.MaxMemoryMiB = bound(o.MaxVCPUs, r.MaxVCPUs), bound(o.MaxMemoryMiB, r.MaxMemoryMiB)
		o.MaxTimeoutSeconds, o.MaxIdleTimeoutSeconds = bound(o.MaxTimeoutSeconds, lt.MaxTimeoutSeconds), lt.MaxIdleTimeoutSeconds
	}
	return o, nil
}

// bound is the lower of two bounds, 0 meaning none.
func bound(a, b int) int {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}
