package templates

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// StateBuilder marks a builder image: never a row, never listed.
const StateBuilder State = "builder"

// BuilderImage packs tree into a temporary image for the builder sandbox
// of versionID (a building version of the tenant's): a recipe's setup
// commands run over it. It is no row of the registry (never listed,
// never resolved by name, charged to nobody: the build's estimate covers
// it); the Version it returns names its file and its own in-VM name, for
// sandbox.Spec.Builder. The caller removes it with RemoveBuilderImage.
func (s *Service) BuilderImage(ctx context.Context, tenantID, versionID, tree string) (Version, error) {
	v, err := s.version(ctx, tenantID, versionID)
	if err != nil {
		return Version{}, err
	}
	if v.State != StateBuilding {
		return Version{}, fmt.Errorf("builder image of template version %s: %w: it is %s", versionID, errdefs.ErrConflict, v.State)
	}
	tdir, err := s.tenantDir(tenantID)
	if err != nil {
		return Version{}, err
	}
	if err := os.MkdirAll(tdir, 0o755); err != nil {
		return Version{}, fmt.Errorf("builder image: %w", err)
	}
	id, err := newID()
	if err != nil {
		return Version{}, fmt.Errorf("builder image: %w", err)
	}
	b := Version{ID: id, TemplateID: v.TemplateID, TenantID: tenantID, Name: v.Name, InVMName: InVMName(id),
		Source: v.Source, State: StateBuilder, Defaults: v.Defaults, CreatedBy: v.CreatedBy, CreatedAt: s.now(),
		Path: filepath.Join(tdir, id+".builder.ext4")}
	packed, err := image.PackTemplate(ctx, tree, b.Path, b.InVMName, id)
	if err == nil {
		// QEMU (its own user on most hosts) opens it read-only.
		err = os.Chmod(b.Path, 0o644)
	}
	if err != nil {
		s.RemoveBuilderImage(b)
		return Version{}, fmt.Errorf("builder image of template %s: %w", v.Name, err)
	}
	b.SizeBytes, b.Digest = packed.Size, "sha256:"+packed.SHA256
	return b, nil
}

// RemoveBuilderImage removes what BuilderImage made.
func (s *Service) RemoveBuilderImage(b Version) error {
	tdir, err := s.tenantDir(b.TenantID)
	if err != nil || !safeID(b.ID) {
		return fmt.Errorf("remove builder image: bad ids")
	}
	if err := os.Remove(filepath.Join(tdir, b.ID+".builder.ext4")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove builder image: %w", err)
	}
	return nil
}
