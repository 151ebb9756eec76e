package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
)

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada Admin"}

func validator(t *testing.T) *policy.Validator {
	t.Helper()
	v, err := policy.NewValidator()
	if err != nil {
		t.Fatalf("NewValidator() = %v", err)
	}
	return v
}

func TestDefaultsPassTheSchema(t *testing.T) {
	d := policy.Defaults()
	got, err := validator(t).Check(d)
	if err != nil {
		t.Fatalf("Check(Defaults()) = %v; want nil", err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Errorf("Check(Defaults()) = %+v; want %+v", got, d)
	}
	if d.Network.Egress.Default != policy.EgressDeny || len(d.Network.Egress.Allow) != 0 || len(d.Credentials.Secrets) != 0 {
		t.Errorf("Defaults() egress %+v, secrets %v; want deny with no rules, no secrets", d.Network.Egress, d.Credentials.Secrets)
	}
}

// edit returns the defaults as a JSON object with fn applied.
func edit(t *testing.T, fn func(m map[string]any)) []byte {
	t.Helper()
	raw, _ := json.Marshal(policy.Defaults())
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	out, _ := json.Marshal(m)
	return out
}

func section(m map[string]any, name string) map[string]any { return m[name].(map[string]any) }

func TestParseListsEveryFailingPath(t *testing.T) {
	v := validator(t)
	tests := []struct {
		name string
		raw  []byte
		want []string // fields, sorted
	}{
		{"negative memory", edit(t, func(m map[string]any) { section(m, "resources")["max_memory_mib"] = -1 }),
			[]string{"/resources/max_memory_mib"}},
		{"malformed domain and bad port", edit(t, func(m map[string]any) {
			section(section(m, "network"), "egress")["allow"] = []any{
				map[string]any{"domain": "api.github.com", "ports": []int{443}},
				map[string]any{"domain": "bad domain!", "ports": []int{0}},
			}
		}), []string{"/network/egress/allow/1/domain", "/network/egress/allow/1/ports/0"}},
		{"several sections at once", edit(t, func(m map[string]any) {
			section(m, "resources")["max_vcpus"] = 0
			section(m, "lifetime")["max_timeout_seconds"] = "long"
			section(section(m, "network"), "egress")["default"] = "maybe"
			delete(section(m, "process"), "seccomp")
			section(m, "vm_pool")["colour"] = "blue"
		}), []string{"/lifetime/max_timeout_seconds", "/network/egress/default", "/process/seccomp", "/resources/max_vcpus", "/vm_pool/colour"}},
		{"missing section", edit(t, func(m map[string]any) { delete(m, "audit") }), []string{"/audit"}},
		{"default above max", edit(t, func(m map[string]any) {
			section(m, "resources")["default_memory_mib"] = 1024
			section(m, "resources")["max_memory_mib"] = 256
		}), []string{"/resources/default_memory_mib"}},
		{"wildcard in the middle", edit(t, func(m map[string]any) {
			section(section(m, "network"), "egress")["deny"] = []any{map[string]any{"domain": "api.*.com"}}
		}), []string{"/network/egress/deny/0/domain"}},
		{"not JSON", []byte(`{"resources":`), []string{"/"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Parse(tc.raw)
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Parse() = %v; want ErrInvalid", err)
			}
			var errs policy.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse() = %T; want policy.Errors", err)
			}
			var got []string
			for _, fe := range errs {
				got = append(got, fe.Field)
				if fe.Detail == "" {
					t.Errorf("Got(%s).Detail = \"\"; want a sentence", fe.Field)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Got(fields) = %v; want %v (%v)", got, tc.want, err)
			}
		})
	}
}

func TestParseAcceptsRules(t *testing.T) {
	raw := edit(t, func(m map[string]any) {
		section(section(m, "network"), "egress")["allow"] = []any{
			map[string]any{"domain": "*.example.com", "ports": []int{443, 8443}},
			map[string]any{"domain": "localhost"},
		}
	})
	d, err := validator(t).Parse(raw)
	if err != nil {
		t.Fatalf("Parse() = %v; want nil", err)
	}
	want := []policy.Rule{{Domain: "*.example.com", Ports: []int{443, 8443}}, {Domain: "localhost", Ports: []int{}}}
	if !reflect.DeepEqual(d.Network.Egress.Allow, want) {
		t.Errorf("Got(allow) = %+v; want %+v", d.Network.Egress.Allow, want)
	}
}

func TestDiffAndPreview(t *testing.T) {
	a := policy.Defaults()
	b := policy.Defaults()
	b.Resources.MaxMemoryMiB = 256
	b.Network.Egress.Allow = []policy.Rule{{Domain: "api.github.com", Ports: []int{443}}}
	got := policy.Diff(a, b)
	if len(got) != 2 || got[0].Path != "/network/egress/allow" || got[1].Path != "/resources/max_memory_mib" {
		t.Fatalf("Diff() = %+v; want /network/egress/allow and /resources/max_memory_mib", got)
	}
	if string(got[1].Old) != "512" || string(got[1].New) != "256" {
		t.Errorf("Got(max_memory_mib change) = %s -> %s; want 512 -> 256", got[1].Old, got[1].New)
	}
	notes := policy.Preview(a, b, []policy.Running{{ID: "sb-big", VCPUs: 1, MemoryMiB: 400, TimeoutSeconds: 60}, {ID: "sb-small", VCPUs: 1, MemoryMiB: 64, TimeoutSeconds: 60}})
	all := strings.Join(notes, "\n")
	for _, want := range []string{"Egress rules change for 2 running sandboxes", "Sandbox sb-big is over the new limits (400 MiB > 256)", "1 running sandbox is over them"} {
		if !strings.Contains(all, want) {
			t.Errorf("Preview() = %q; want it to contain %q", all, want)
		}
	}
	if strings.Contains(all, "sb-small") {
		t.Errorf("Preview() = %q; want no note on sb-small (within the limits)", all)
	}
}

func newTenant(t *testing.T, db dbtest.DB, slug string) string {
	t.Helper()
	tn, err := tenants.NewStore(db.DB, nil).CreateTenant(context.Background(), audit.Actor{Kind: audit.ActorSystem, ID: "test"}, slug, "")
	if err != nil {
		t.Fatalf("CreateTenant(%s) = %v", slug, err)
	}
	return tn.ID
}

// newStore is a store on db with two tenants.
func newStore(t *testing.T, db dbtest.DB, slugA, slugB string) (s *policy.Store, ta, tb string) {
	t.Helper()
	s, err := policy.NewStore(db.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, newTenant(t, db, slugA), newTenant(t, db, slugB)
}

func TestStore(t *testing.T) {
	for _, db := range dbtest.Databases(t) {
		t.Run(db.Name, func(t *testing.T) {
			ctx := context.Background()
			s, ta, tb := newStore(t, db, "pol-a", "pol-b")

			cur, err := s.Current(ctx, ta)
			if err != nil || cur.Version != 0 || !reflect.DeepEqual(cur.Doc, policy.Defaults()) {
				t.Fatalf("Current(new tenant) = v%d, %v; want v0 with the defaults", cur.Version, err)
			}

			d1 := policy.Defaults()
			d1.Network.Egress.Allow = []policy.Rule{{Domain: "api.github.com", Ports: []int{443}}}
			v1, err := s.Save(ctx, admin, ta, policy.Edit{Doc: d1, Reason: "let agents reach GitHub", Base: new(0)})
			if err != nil || v1.Version != 1 || v1.AuthorName != "Ada Admin" || v1.Reason != "let agents reach GitHub" {
				t.Fatalf("Save() = %+v, %v; want version 1 by Ada Admin", v1, err)
			}

			bad := d1
			bad.Resources.MaxMemoryMiB = -5
			if _, err := s.Save(ctx, admin, ta, policy.Edit{Doc: bad, Reason: "oops"}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Save(negative memory) = %v; want ErrInvalid", err)
			}
			if _, err := s.Save(ctx, admin, ta, policy.Edit{Doc: d1, Reason: "again"}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Save(unchanged) = %v; want ErrInvalid", err)
			}
			d2 := d1
			d2.Resources.MaxMemoryMiB = 256
			if _, err := s.Save(ctx, admin, ta, policy.Edit{Doc: d2, Reason: "stale", Base: new(0)}); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Save(base 0 after v1) = %v; want ErrConflict", err)
			}
			if _, err := s.Save(ctx, admin, ta, policy.Edit{Doc: d2}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Save(no reason) = %v; want ErrInvalid", err)
			}
			v2, err := s.Save(ctx, admin, ta, policy.Edit{Doc: d2, Reason: "smaller sandboxes", Base: new(1)})
			if err != nil || v2.Version != 2 {
				t.Fatalf("Save(v2) = %+v, %v; want version 2", v2, err)
			}

			// A rollback needs a reason like a save: without one nothing is
			// stored; on a stale base it is a conflict.
			if _, err := s.Rollback(ctx, admin, ta, 1, "  "); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Rollback(1, no reason) = %v; want ErrInvalid", err)
			}
			if _, err := s.RollbackOn(ctx, admin, ta, 1, "stale", new(1)); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("RollbackOn(1, base 1 after v2) = %v; want ErrConflict", err)
			}
			if cur, err := s.Current(ctx, ta); err != nil || cur.Version != 2 {
				t.Fatalf("Current after refused rollbacks = v%d, %v; want v2", cur.Version, err)
			}
			v3, err := s.RollbackOn(ctx, admin, ta, 1, "too small after all", new(2))
			if err != nil || v3.Version != 3 || v3.RolledBackFrom == nil || *v3.RolledBackFrom != 1 || !reflect.DeepEqual(v3.Doc, v1.Doc) {
				t.Fatalf("Rollback(1) = %+v, %v; want version 3 holding version 1's document", v3, err)
			}
			list, err := s.List(ctx, ta)
			if err != nil {
				t.Fatal(err)
			}
			var nums []int
			for _, v := range list {
				nums = append(nums, v.Version)
			}
			if !reflect.DeepEqual(nums, []int{3, 2, 1, 0}) {
				t.Errorf("Got(List versions) = %v; want [3 2 1 0]", nums)
			}

			// The other tenant sees none of it.
			if cur, err := s.Current(ctx, tb); err != nil || cur.Version != 0 {
				t.Errorf("Current(other tenant) = v%d, %v; want v0", cur.Version, err)
			}
			if _, err := s.Get(ctx, tb, 1); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Get(other tenant, 1) = %v; want ErrNotFound", err)
			}
			if _, err := s.Rollback(ctx, admin, tb, 2, "steal"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Rollback(other tenant, 2) = %v; want ErrNotFound", err)
			}

			events, err := audit.NewLog(db.DB, nil).List(ctx, ta, audit.Filter{Type: "policy."})
			if err != nil {
				t.Fatal(err)
			}
			if len(events) != 3 || events[0].Type != audit.TypePolicyRolledBack {
				t.Fatalf("Got(policy audit events) = %d, first %q; want 3, newest %s", len(events), firstType(events), audit.TypePolicyRolledBack)
			}
			if got := events[0].Details["reason"]; got != "too small after all" {
				t.Errorf("Got(rollback event reason) = %v; want the reason given", got)
			}
		})
	}
}

func firstType(es []audit.Event) string {
	if len(es) == 0 {
		return ""
	}
	return es[0].Type
}
