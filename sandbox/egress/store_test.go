package egress_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// TestStoreSecretsReflected: the count of values rewritten in a
// connection's answers is kept with its event (migration 00013), on SQLite
// and PostgreSQL, and read back in its tenant only.
func TestStoreSecretsReflected(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			ts := tenants.NewStore(d.DB, nil)
			sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
			a, err := ts.CreateTenant(ctx, sys, "refl-a", "A")
			if err != nil {
				t.Fatal(err)
			}
			b, err := ts.CreateTenant(ctx, sys, "refl-b", "B")
			if err != nil {
				t.Fatal(err)
			}
			st := egress.NewStore(d.DB)
			for _, ev := range []egress.Event{
				{TenantID: a.ID, SandboxID: "sb-1", Method: "CONNECT", Host: "api.example.com", Port: 443, Decision: egress.DecisionAllow,
					Intercepted: true, SecretsReflected: 4, StartedAt: time.Now()},
				{TenantID: a.ID, SandboxID: "sb-1", Method: "CONNECT", Host: "api.example.com", Port: 443, Decision: egress.DecisionAllow,
					Intercepted: true, StartedAt: time.Now().Add(time.Second)},
			} {
				if err := st.Record(ctx, &ev); err != nil {
					t.Fatal(err)
				}
			}
			evs, err := st.Events(ctx, a.ID, egress.Filter{})
			if err != nil || len(evs) != 2 {
				t.Fatalf("Got(Events) = %d, %v; want 2", len(evs), err)
			}
			if evs[0].SecretsReflected != 0 || evs[1].SecretsReflected != 4 {
				t.Errorf("Got(SecretsReflected) = %d, %d; want 0 (newest), 4", evs[0].SecretsReflected, evs[1].SecretsReflected)
			}
			if other, err := st.Events(ctx, b.ID, egress.Filter{}); err != nil || len(other) != 0 {
				t.Errorf("Got(Events of the other tenant) = %d, %v; want none", len(other), err)
			}
		})
	}
}
