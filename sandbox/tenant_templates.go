package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Tenant templates at create (tenant_templates.go). A spec may name a
// built-in or one of its tenant's own ready templates (sandbox/templates);
// another tenant's name is unknown, like any other. The sandbox records
// the version's id in template_version; the version's image is
// hot-plugged into the VM the sandbox lands on when that VM lacks it, and
// the agent mounts it by the version's in-VM name. The version's defaults
// apply: its Env under the sandbox's own, its Workdir as the commands'
// default directory, its User recorded (commands run as the sandbox user).

// TenantTemplates resolves a tenant's own template names
// (*templates.Service does).
type TenantTemplates interface {
	Resolve(ctx context.Context, tenantID, name string) (templates.Version, error)
	VersionByID(ctx context.Context, tenantID, versionID string) (templates.Version, error)
	Ready(ctx context.Context, tenantID string) ([]templates.Version, error)
}

// withTenantTemplates is tpls and the tenant's own ready templates (for
// the create form).
func (s *Service) withTenantTemplates(ctx context.Context, tenantID string, tpls []image.Template) ([]image.Template, error) {
	if s.cfg.TenantTemplates == nil {
		return tpls, nil
	}
	vs, err := s.cfg.TenantTemplates.Ready(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	out := append([]image.Template(nil), tpls...)
	for _, v := range vs {
		out = append(out, image.Template{Name: v.Name, Version: v.ID, Path: v.Path, Format: image.FormatExt4, SizeBytes: v.SizeBytes})
	}
	return out, nil
}

// diskVMs is what the VM pools do for hot-plugged disks (*vmpool.Service
// does; a VMs without it cannot run tenant templates).
type diskVMs interface {
	EnsureDisk(ctx context.Context, tenantID, vmID, path, serial string, readOnly bool,
		free func(ctx context.Context, disks []vmpool.AttachedDisk) error) (bool, error)
	DetachDisk(ctx context.Context, tenantID, vmID, serial string, locked bool) error
	Disks(ctx context.Context, tenantID, vmID string) ([]vmpool.AttachedDisk, error)
}

func (s *Service) diskVMs() (diskVMs, error) {
	d, ok := s.vms.(diskVMs)
	if !ok {
		return nil, fmt.Errorf("%w: these VM pools cannot hot-plug template disks", vmpool.ErrUnavailable)
	}
	return d, nil
}

// tenantTemplate looks spec's template up among the tenant's own when it
// is no built-in. It returns the version (nil for a built-in) and the
// templates resolve should check against.
func (s *Service) tenantTemplate(ctx context.Context, tenantID string, spec *Spec) (*templates.Version, []image.Template, error) {
	tpls := s.templates
	if b := spec.Builder; b != nil {
		if b.TenantID != tenantID || b.Path == "" {
			return nil, nil, fmt.Errorf("create sandbox: builder image of another tenant or none: %w", errdefs.ErrNotFound)
		}
		v := *b
		spec.Template = v.Name
		return &v, append(append([]image.Template(nil), tpls...), image.Template{Name: v.Name, Version: v.ID, Path: v.Path,
			Format: image.FormatExt4, SizeBytes: v.SizeBytes}), nil
	}
	if spec.Template == "" || s.cfg.TenantTemplates == nil {
		return nil, tpls, nil
	}
	if _, ok := findTemplate(tpls, spec.Template); ok {
		return nil, tpls, nil
	}
	v, err := s.cfg.TenantTemplates.Resolve(ctx, tenantID, spec.Template)
	if errdefs.IsNotFound(err) {
		return nil, tpls, nil // resolve names it unknown
	}
	if err != nil {
		return nil, nil, fmt.Errorf("create sandbox: %w", err)
	}
	// Its env under the sandbox's own.
	if len(v.Defaults.Env) > 0 {
		env := maps.Clone(v.Defaults.Env)
		maps.Copy(env, spec.Env)
		spec.Env = env
	}
	tpls = append(append([]image.Template(nil), tpls...), image.Template{Name: v.Name, Version: v.ID, Path: v.Path,
		Format: image.FormatExt4, SizeBytes: v.SizeBytes})
	return &v, tpls, nil
}

// attachTemplate makes the version's disk reach the sandbox's VM and
// reports whether it was plugged in just now.
func (s *Service) attachTemplate(ctx context.Context, tenantID, vmID string, v *templates.Version) (bool, error) {
	d, err := s.diskVMs()
	if err != nil {
		return false, err
	}
	return d.EnsureDisk(ctx, tenantID, vmID, v.Path, v.InVMName, true, func(ctx context.Context, disks []vmpool.AttachedDisk) error {
		return s.freeTemplateSlots(ctx, tenantID, vmID, disks)
	})
}

// isTenantTemplateSerial tells a tenant template's disk ("t" + 12 hex
// digits) from the built-ins' and the scratch disk (no serial) and
// volumes.
func isTenantTemplateSerial(serial string) bool {
	if len(serial) != 13 || serial[0] != 't' {
		return false
	}
	return strings.Trim(serial[1:], "0123456789abcdef") == ""
}

// freeTemplateSlots detaches the tenant template disks of the VM that no
// sandbox there that has not ended runs (the VM's disk lock is held).
func (s *Service) freeTemplateSlots(ctx context.Context, tenantID, vmID string, disks []vmpool.AttachedDisk) error {
	var used []string
	if err := s.store.db.WithContext(ctx).Model(&Sandbox{}).Where("tenant_id = ? AND vm_id = ? AND state NOT IN ?",
		tenantID, vmID, []State{StateFailed, StateDestroyed}).Pluck("template_version", &used).Error; err != nil {
		return fmt.Errorf("templates in use on vm %s: %w", vmID, err)
	}
	inUse := map[string]bool{}
	for _, v := range used {
		if v != "" {
			inUse[templates.InVMName(v)] = true
		}
	}
	var errs []error
	for _, d := range disks {
		if !isTenantTemplateSerial(d.Serial) || inUse[d.Serial] {
			continue
		}
		if err := s.detachTemplate(ctx, tenantID, vmID, d.Serial, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// detachTemplate has the VM's agent let go of a tenant template disk and
// unplugs it.
func (s *Service) detachTemplate(ctx context.Context, tenantID, vmID, serial string, locked bool) error {
	c, err := s.vms.Agent(ctx, tenantID, vmID)
	if err != nil {
		return err
	}
	if err := c.ReleaseTemplate(ctx, serial); err != nil && !errors.Is(err, agentproto.ErrNotFound) {
		return err
	}
	d, err := s.diskVMs()
	if err != nil {
		return err
	}
	return d.DetachDisk(ctx, tenantID, vmID, serial, locked)
}

// DetachTemplateVersions unplugs the versions (deleted by the registry)
// from every running VM of the tenant that holds them. Errors are logged:
// a VM that keeps one holds it until it ends.
func (s *Service) DetachTemplateVersions(ctx context.Context, tenantID string, versions []templates.Version) {
	if s.vms == nil || len(versions) == 0 {
		return
	}
	gone := map[string]bool{}
	for _, v := range versions {
		gone[v.InVMName] = true
	}
	dv, err := s.diskVMs()
	if err != nil {
		return
	}
	sts, err := s.vms.List(ctx, tenantID)
	if err != nil {
		s.log.Warn("detach deleted templates", "tenant", tenantID, "err", err)
		return
	}
	for _, st := range sts {
		if st.VM.State != vmpool.StateRunning {
			continue
		}
		disks, err := dv.Disks(ctx, tenantID, st.VM.ID)
		if err != nil {
			s.log.Warn("detach deleted templates", "vm", st.VM.ID, "err", err)
			continue
		}
		for _, d := range disks {
			if gone[d.Serial] {
				if err := s.detachTemplate(ctx, tenantID, st.VM.ID, d.Serial, false); err != nil {
					s.log.Warn("detach deleted template", "vm", st.VM.ID, "serial", d.Serial, "err", err)
				}
			}
		}
	}
}
