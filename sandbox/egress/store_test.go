package egress_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
)

func newTenantIn(t testing.TB, db *gorm.DB, slug string) string {
	t.Helper()
	ten, err := tenants.NewStore(db, nil).CreateTenant(context.Background(), audit.Actor{Kind: audit.ActorSystem, ID: "test"}, slug, slug)
	if err != nil {
		t.Fatal(err)
	}
	return ten.ID
}

// ledgerEgress sums the usage ledger's egress bytes of a sandbox.
func ledgerEgress(t *testing.T, db *gorm.DB, tenantID, sandboxID string) (up, down int64) {
	t.Helper()
	var r struct{ Up, Down int64 }
	if err := db.Model(&usage.Entry{}).Select("COALESCE(SUM(egress_up_bytes), 0) AS up, COALESCE(SUM(egress_down_bytes), 0) AS down").
		Where("tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID).Scan(&r).Error; err != nil {
		t.Fatal(err)
	}
	return r.Up, r.Down
}

// TestStorePrune: events older than the cutoff go, in every tenant; newer
// ones stay, and the usage ledger keeps the pruned events' bytes.
func TestStorePrune(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			s := egress.NewStore(d.DB)
			now := time.Now().UTC()
			type row struct {
				tenant string
				age    time.Duration
			}
			a, b := newTenantIn(t, d.DB, "prune-a"), newTenantIn(t, d.DB, "prune-b")
			rows := []row{{a, 40 * 24 * time.Hour}, {a, 31 * 24 * time.Hour}, {a, 29 * 24 * time.Hour}, {a, time.Minute},
				{b, 90 * 24 * time.Hour}, {b, time.Hour}}
			for _, r := range rows {
				ev := egress.Event{TenantID: r.tenant, SandboxID: "sb-" + r.tenant, VMID: "vm", Method: "CONNECT", Host: "example.com", Port: 443,
					Decision: egress.DecisionAllow, Rule: "default allow", BytesUp: 10, BytesDown: 100, StartedAt: now.Add(-r.age)}
				if err := s.Record(ctx, &ev); err != nil {
					t.Fatal(err)
				}
			}
			n, err := s.Prune(ctx, now.Add(-30*24*time.Hour))
			if err != nil || n != 3 {
				t.Fatalf("Got(Prune) = %d, %v; want 3 (two of a, one of b)", n, err)
			}
			for tenant, want := range map[string]int{a: 2, b: 1} {
				evs, err := s.Events(ctx, tenant, egress.Filter{})
				if err != nil || len(evs) != want {
					t.Errorf("Got(%d events of tenant %s after Prune) = %v; want %d", len(evs), tenant, err, want)
				}
				for _, e := range evs {
					if e.StartedAt.Before(now.Add(-30 * 24 * time.Hour)) {
						t.Errorf("Got(event of %s) after Prune; want it pruned", e.StartedAt)
					}
				}
			}
			if up, down := ledgerEgress(t, d.DB, a, "sb-"+a); up != 40 || down != 400 {
				t.Errorf("Got(ledger egress of a) = %d, %d; want 40, 400 (pruned events stay billed)", up, down)
			}
			if n, err := s.Prune(ctx, now.Add(-30*24*time.Hour)); err != nil || n != 0 {
				t.Errorf("Got(second Prune) = %d, %v; want 0", n, err)
			}
		})
	}
}

// TestStoreBoundsFields: whatever a sandbox put into an event's text (a
// 64 KiB request line quoted in an error, bytes that are not UTF-8, NUL)
// is stored bounded and valid, on both databases: before, the error went
// in whole and PostgreSQL refused the row outright.
func TestStoreBoundsFields(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			s := egress.NewStore(d.DB)
			tn := newTenantIn(t, d.DB, "bounds")
			huge := strings.Repeat("é", 32<<10) // 64 KiB
			ev := egress.Event{TenantID: tn, SandboxID: "sb-" + strings.Repeat("x", 1000), VMID: "vm", Method: strings.Repeat("M", 5000),
				Host: "bad\xff\xfehost\x00" + huge, Port: 443, Decision: egress.DecisionDeny, Rule: "default deny",
				Error: `malformed HTTP request "` + huge + "\xc3\"", StartedAt: time.Now()}
			if err := s.Record(ctx, &ev); err != nil {
				t.Fatalf("Got(Record) = %v; want the event stored", err)
			}
			evs, err := s.Events(ctx, tn, egress.Filter{})
			if err != nil || len(evs) != 1 {
				t.Fatalf("Got(Events) = %d, %v; want 1", len(evs), err)
			}
			got := evs[0]
			for _, f := range []struct {
				name, v string
				max     int
			}{{"error", got.Error, 512}, {"host", got.Host, 255}, {"method", got.Method, 32}, {"sandbox_id", got.SandboxID, 64}} {
				if len(f.v) > f.max || !utf8.ValidString(f.v) || strings.ContainsRune(f.v, 0) || !strings.HasSuffix(f.v, "…") {
					t.Errorf("Got(%s) = %d bytes, valid %v; want at most %d valid bytes marked cut", f.name, len(f.v), utf8.ValidString(f.v), f.max)
				}
			}
			if !strings.HasPrefix(got.Error, `malformed HTTP request "é`) {
				t.Errorf("Got(error) = %.40q; want its start kept", got.Error)
			}
		})
	}
}

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
