package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
)

// paths are the paths of cs, in order.
func paths(cs []policy.Change) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}

// TestProposeCommit: the store checks an edit's document once (raw JSON
// or a Go document), says what it changes against the version in force,
// and Commit saves exactly that, with the changes found in its own
// transaction; refused edits write nothing.
func TestProposeCommit(t *testing.T) {
	for _, db := range dbtest.Databases(t) {
		t.Run(db.Name, func(t *testing.T) {
			ctx := context.Background()
			s, ta, tb := newStore(t, db, "prop-a", "prop-b")
			d1 := policy.Defaults()
			d1.Resources.MaxMemoryMiB, d1.Lifetime.DefaultTimeoutSeconds = 256, 600
			raw1, _ := json.Marshal(d1)

			refused := []struct {
				name string
				edit policy.Edit
				want error
				says string // in the error, or a failing path
			}{
				{"not JSON", policy.Edit{Raw: []byte(`{"resources":`), Reason: "x"}, errdefs.ErrInvalid, "/"},
				{"schema", policy.Edit{Raw: []byte(strings.Replace(string(raw1), `"max_memory_mib":256`, `"max_memory_mib":-1`, 1)), Reason: "x"},
					errdefs.ErrInvalid, "/resources/max_memory_mib"},
				{"cross-field", policy.Edit{Raw: []byte(strings.Replace(string(raw1), `"default_timeout_seconds":600`, `"default_timeout_seconds":99999`, 1)), Reason: "x"},
					errdefs.ErrInvalid, "/lifetime/default_timeout_seconds"},
				{"stale base", policy.Edit{Raw: raw1, Reason: "x", Base: new(3)}, errdefs.ErrConflict, "since version 3 was loaded"},
			}
			for _, tt := range refused {
				t.Run(tt.name, func(t *testing.T) {
					before := dbtest.Count(t, db.DB)
					_, perr := s.Propose(ctx, ta, tt.edit)
					_, serr := s.Save(ctx, admin, ta, tt.edit)
					for op, err := range map[string]error{"Propose": perr, "Save": serr} {
						var errs policy.Errors
						named := strings.Contains(fmtErr(err), tt.says)
						if errors.As(err, &errs) {
							named = false
							for _, fe := range errs {
								named = named || fe.Field == tt.says
							}
						}
						if !errors.Is(err, tt.want) || !named {
							t.Errorf("Got(%s) = %v; want %v naming %q", op, err, tt.want, tt.says)
						}
					}
					if ok, diff := dbtest.Equal(before, dbtest.Count(t, db.DB)); !ok {
						t.Errorf("Got(refused edit) wrote %s; want nothing", diff)
					}
				})
			}

			p, err := s.Propose(ctx, ta, policy.Edit{Raw: raw1, Base: new(0)})
			if err != nil {
				t.Fatalf("Propose(valid, no reason) = %v; want a proposal (a preview needs no reason)", err)
			}
			wantPaths := []string{"/lifetime/default_timeout_seconds", "/resources/max_memory_mib"}
			if p.Current.Version != 0 || !reflect.DeepEqual(p.Doc, d1) || !reflect.DeepEqual(paths(p.Changes), wantPaths) || len(p.Notes(nil)) == 0 {
				t.Errorf("Got(Propose) = current v%d, changes %v, %d notes; want v0, %v and notes", p.Current.Version, paths(p.Changes), len(p.Notes(nil)), wantPaths)
			}
			before := dbtest.Count(t, db.DB)
			if _, err := s.Commit(ctx, admin, ta, p); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "say why") {
				t.Errorf("Got(Commit without a reason) = %v; want ErrInvalid on reason", err)
			}
			withReason, err := s.Propose(ctx, ta, policy.Edit{Raw: raw1, Reason: "smaller and shorter", Base: new(0)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Commit(ctx, admin, tb, withReason); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Commit of tenant A's proposal as tenant B) = %v; want ErrNotFound", err)
			}
			if _, err := s.Commit(ctx, admin, ta, policy.Proposal{Doc: d1}); err == nil {
				t.Error("Got(Commit of a proposal Propose did not make) = nil; want an error")
			}
			if ok, diff := dbtest.Equal(before, dbtest.Count(t, db.DB)); !ok {
				t.Errorf("Got(refused commits) wrote %s; want nothing", diff)
			}
			v1, err := s.Commit(ctx, admin, ta, withReason)
			if err != nil || v1.Version != 1 || !reflect.DeepEqual(v1.Changes, withReason.Changes) {
				t.Fatalf("Got(Commit) = v%d changes %v, %v; want v1 with the proposal's changes %v", v1.Version, paths(v1.Changes), err, wantPaths)
			}
			if _, err := s.Commit(ctx, admin, ta, withReason); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(Commit of the same proposal again) = %v; want ErrConflict (its base is stale)", err)
			}
			if got, err := s.Get(ctx, ta, 1); err != nil || got.Changes != nil {
				t.Errorf("Got(Get(1).Changes) = %v, %v; want nil (only a save says what it changed)", got.Changes, err)
			}

			// A proposal without a base, with a version saved after it: the
			// commit's changes are against what was in force when it saved.
			d3 := d1
			d3.Resources.MaxVCPUs = 2
			raw3, _ := json.Marshal(d3)
			late, err := s.Propose(ctx, ta, policy.Edit{Raw: raw3, Reason: "two vCPUs"})
			if err != nil {
				t.Fatal(err)
			}
			d2 := d1
			d2.Resources.MaxMemoryMiB = 384
			v2, err := s.Save(ctx, admin, ta, policy.Edit{Doc: d2, Reason: "a bit more memory"})
			if err != nil || !reflect.DeepEqual(paths(v2.Changes), []string{"/resources/max_memory_mib"}) {
				t.Fatalf("Got(Save(v2)) = changes %v, %v; want /resources/max_memory_mib", paths(v2.Changes), err)
			}
			v3, err := s.Commit(ctx, admin, ta, late)
			wantLate := []string{"/resources/max_memory_mib", "/resources/max_vcpus"}
			if err != nil || v3.Version != 3 || !reflect.DeepEqual(paths(v3.Changes), wantLate) {
				t.Errorf("Got(Commit after v2) = v%d changes %v, %v; want v3 changing %v against v2", v3.Version, paths(v3.Changes), err, wantLate)
			}
			rb, err := s.Rollback(ctx, admin, ta, 2, "back to v2")
			if err != nil || !reflect.DeepEqual(paths(rb.Changes), wantLate) {
				t.Errorf("Got(Rollback(2).Changes) = %v, %v; want %v", paths(rb.Changes), err, wantLate)
			}
		})
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
