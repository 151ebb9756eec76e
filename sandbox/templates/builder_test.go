package templates_test

import (
	"context"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestBuilderImage: a building version's builder image is a file of its
// own, never a row (not listed, not resolved, charged nothing), gone after
// RemoveBuilderImage; another tenant's version is not found, and a ready
// version takes none.
func TestBuilderImage(t *testing.T) {
	ctx := context.Background()
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			s, dir := newService(t, d.DB)
			acme, other := newTenant(t, d.DB, "acme"), newTenant(t, d.DB, "other")
			v, err := s.Begin(ctx, acme, templates.Begin{Name: "tool", Source: templates.SourceRecipe, Estimate: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.BuilderImage(ctx, other, v.ID, smallTree(t)); !errdefs.IsNotFound(err) {
				t.Errorf("Got(other's BuilderImage) = %v; want not found", err)
			}
			before := dbtest.Count(t, d.DB)
			used, err := s.Used(ctx, acme)
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.BuilderImage(ctx, acme, v.ID, smallTree(t))
			if err != nil {
				t.Fatalf("BuilderImage = %v", err)
			}
			if b.ID == v.ID || b.InVMName != templates.InVMName(b.ID) || b.State != templates.StateBuilder || b.SizeBytes <= 0 || b.TenantID != acme {
				t.Errorf("Got(builder image) = %+v; want its own id and in-VM name, state builder, a size", b)
			}
			if files := images(t, dir); len(files) != 1 {
				t.Errorf("Got(files) = %v; want the builder image", files)
			}
			if ok, diff := dbtest.Equal(before, dbtest.Count(t, d.DB)); !ok {
				t.Errorf("rows changed: %s; want none", diff)
			}
			if got, _ := s.Used(ctx, acme); got != used {
				t.Errorf("Got(used) = %d; want %d (the estimate alone)", got, used)
			}
			if _, err := s.Resolve(ctx, acme, "tool"); !errdefs.IsNotFound(err) {
				t.Errorf("Got(Resolve while only a builder image exists) = %v; want not found", err)
			}
			if err := s.RemoveBuilderImage(b); err != nil {
				t.Fatal(err)
			}
			if files := images(t, dir); len(files) != 0 {
				t.Errorf("Got(files after RemoveBuilderImage) = %v; want none", files)
			}
			if _, err := s.Finish(ctx, acme, v.ID, smallTree(t), templates.Defaults{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.BuilderImage(ctx, acme, v.ID, smallTree(t)); !errdefs.IsConflict(err) {
				t.Errorf("Got(BuilderImage of a ready version) = %v; want conflict", err)
			}
		})
	}
}
