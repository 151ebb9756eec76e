package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var testActor = audit.Actor{Kind: audit.ActorUser, ID: "u-1", Name: "dev@example.test"}

func newTenant(t *testing.T, db *gorm.DB, slug string) tenants.Tenant {
	t.Helper()
	tn, err := tenants.NewStore(db, nil).CreateTenant(context.Background(), audit.Actor{Kind: audit.ActorSystem, ID: "test"}, slug, "")
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func newRecord(tenantID string, n, vcpus, mem int) *Sandbox {
	id, _ := newID()
	return &Sandbox{ID: id, TenantID: tenantID, Template: "busybox", VCPUs: vcpus, MemoryMiB: mem, TimeoutSeconds: 60,
		EnvKeysJSON: "[]", MetadataJSON: fmt.Sprintf(`{"n":"%d"}`, n), CreatedBy: testActor.ID}
}

func count(t *testing.T, db *gorm.DB, table, tenantID string) int64 {
	t.Helper()
	var n int64
	if err := db.Table(table).Where("tenant_id = ?", tenantID).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStoreQuotaInCreate: the quota check and the insert are one
// transaction, so concurrent creates never exceed a quota; a refused create
// writes nothing, and names the quota. On SQLite and PostgreSQL.
func TestStoreQuotaInCreate(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			st := NewStore(d.DB, nil)
			tn := newTenant(t, d.DB, "quota-"+d.Name)
			q := tenants.DefaultQuota()
			q.MaxSandboxes, q.MaxVCPUs, q.MaxMemoryMiB = 3, 8, 1000
			if _, err := tenants.NewStore(d.DB, nil).SetQuota(ctx, testActor, tn.ID, q); err != nil {
				t.Fatal(err)
			}

			ok := createdOrMaxSandboxes(t, raceCreates(ctx, []*Store{st}, tn.ID, 10))
			if ok != 3 || count(t, d.DB, "sandboxes", tn.ID) != 3 || count(t, d.DB, "sandbox_events", tn.ID) != 3 {
				t.Errorf("Got(created) = %d, rows %d, events %d; want 3 of each (the quota)", ok,
					count(t, d.DB, "sandboxes", tn.ID), count(t, d.DB, "sandbox_events", tn.ID))
			}
			if n := len(auditOf(t, d.DB, tn.ID, audit.TypeSandboxCreated)); n != 3 {
				t.Errorf("Got(sandbox.created events) = %d; want 3", n)
			}

			// Ended sandboxes free their share; vCPUs and memory are checked too.
			var first Sandbox
			d.DB.Where("tenant_id = ?", tn.ID).Order("id").Take(&first)
			if _, changed, err := st.transition(ctx, first.ID, change{From: []State{StateCreating}, To: StateFailed, Reason: "test"}); err != nil || !changed {
				t.Fatalf("transition = %v, %v", changed, err)
			}
			for _, tt := range []struct {
				vcpus, mem int
				quota      string
			}{{7, 100, tenants.QuotaMaxVCPUs}, {1, 801, tenants.QuotaMaxMemoryMiB}} {
				before := count(t, d.DB, "sandboxes", tn.ID)
				err := st.create(ctx, testActor, newRecord(tn.ID, 99, tt.vcpus, tt.mem))
				var qe *errdefs.QuotaError
				if !errors.As(err, &qe) || qe.Quota != tt.quota {
					t.Errorf("Got(create %d vCPUs %d MiB) = %v; want quota %s", tt.vcpus, tt.mem, err, tt.quota)
				}
				if after := count(t, d.DB, "sandboxes", tn.ID); after != before {
					t.Errorf("Got(rows after a refused create) = %d; want %d", after, before)
				}
			}
			if err := st.create(ctx, testActor, newRecord(tn.ID, 100, 6, 800)); err != nil {
				t.Errorf("Got(create within the freed quota) = %v; want success", err)
			}
		})
	}
}

func auditOf(t *testing.T, db *gorm.DB, tenantID, typ string) []audit.Event {
	t.Helper()
	evs, err := audit.NewLog(db, nil).List(context.Background(), tenantID, audit.Filter{Type: typ, Limit: audit.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestStoreTenantScoped: every read takes the tenant; another tenant's
// sandbox is not found, and lists hold only the tenant's own.
func TestStoreTenantScoped(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			st := NewStore(d.DB, nil)
			a, b := newTenant(t, d.DB, "scope-a-"+d.Name), newTenant(t, d.DB, "scope-b-"+d.Name)
			sa, sb := newRecord(a.ID, 1, 1, 64), newRecord(b.ID, 2, 1, 64)
			for _, s := range []*Sandbox{sa, sb} {
				if err := st.create(ctx, testActor, s); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := st.Sandbox(ctx, a.ID, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(A reads B's sandbox) = %v; want ErrNotFound", err)
			}
			if evs, err := st.Events(ctx, a.ID, sb.ID); err != nil || len(evs) != 0 {
				t.Errorf("Got(A reads B's events) = %d, %v; want none", len(evs), err)
			}
			if xs, err := st.Execs(ctx, a.ID, sb.ID); err != nil || len(xs) != 0 {
				t.Errorf("Got(A reads B's commands) = %d, %v; want none", len(xs), err)
			}
			list, err := st.Sandboxes(ctx, a.ID)
			if err != nil || len(list) != 1 || list[0].ID != sa.ID {
				t.Errorf("Got(A's list) = %+v, %v; want only %s", list, err, sa.ID)
			}
			got, err := st.Sandbox(ctx, a.ID, sa.ID)
			if err != nil || got.State != StateCreating || got.ExpiresAt.Sub(got.CreatedAt).Seconds() != 60 {
				t.Errorf("Got(A's sandbox) = %+v, %v; want creating, expiring 60 s after its creation", got, err)
			}
		})
	}
}

// TestStoreTransitionOnce: of two observers of one end, exactly one records
// it (one event row, one audit event).
func TestStoreTransitionOnce(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			st := NewStore(d.DB, nil)
			tn := newTenant(t, d.DB, "once-"+d.Name)
			s := newRecord(tn.ID, 1, 1, 64)
			if err := st.create(ctx, testActor, s); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			changed := make([]bool, 8)
			for i := range changed {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ev := SystemActor().Event(tn.ID, audit.TypeSandboxFailed, "sandbox", s.ID, nil)
					_, changed[i], _ = st.transition(ctx, s.ID, change{From: []State{StateCreating}, To: StateFailed, Reason: "vanished", Audit: &ev})
				}()
			}
			wg.Wait()
			n := 0
			for _, c := range changed {
				if c {
					n++
				}
			}
			if n != 1 || count(t, d.DB, "sandbox_events", tn.ID) != 2 || len(auditOf(t, d.DB, tn.ID, audit.TypeSandboxFailed)) != 1 {
				t.Errorf("Got(changes) = %d, events %d, audit %d; want 1, 2 (creating, failed), 1", n,
					count(t, d.DB, "sandbox_events", tn.ID), len(auditOf(t, d.DB, tn.ID, audit.TypeSandboxFailed)))
			}
			got, _ := st.Sandbox(ctx, tn.ID, s.ID)
			if got.State != StateFailed || got.StateReason != "vanished" || got.EndedAt == nil {
				t.Errorf("Got(sandbox) = %s %q ended %v; want failed, vanished, with its end time", got.State, got.StateReason, got.EndedAt)
			}
		})
	}
}

// TestStoreIdempotencyKey: the key is written with the sandbox's row; it is
// found by its tenant and creator, never another tenant's. On SQLite and
// PostgreSQL.
func TestStoreIdempotencyKey(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			st := NewStore(d.DB, nil)
			a, b := newTenant(t, d.DB, "idem-a-"+d.Name), newTenant(t, d.DB, "idem-b-"+d.Name)
			first := newRecord(a.ID, 1, 1, 64)
			first.IdempotencyKey = "k-1"
			if err := st.create(ctx, testActor, first); err != nil {
				t.Fatal(err)
			}
			other := newRecord(b.ID, 2, 1, 64)
			other.IdempotencyKey = "k-1"
			if err := st.create(ctx, testActor, other); err != nil {
				t.Fatal(err)
			}
			got, err := st.ByIdempotencyKey(ctx, a.ID, testActor.ID, "k-1")
			if err != nil || got.ID != first.ID || got.IdempotencyKey != "k-1" || got.State != StateCreating {
				t.Errorf("Got(ByIdempotencyKey) = %+v, %v; want %s, creating, as soon as recorded", got, err, first.ID)
			}
			if _, err := st.ByIdempotencyKey(ctx, a.ID, "someone-else", "k-1"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(ByIdempotencyKey of another creator) err = %v; want ErrNotFound", err)
			}
			list, err := st.WithIdempotencyKey(ctx, b.ID, "k-1")
			if err != nil || len(list) != 1 || list[0].ID != other.ID {
				t.Errorf("Got(WithIdempotencyKey in tenant b) = %v, %v; want only b's sandbox", list, err)
			}
			if list, err := st.WithIdempotencyKey(ctx, a.ID, "k-2"); err != nil || len(list) != 0 {
				t.Errorf("Got(WithIdempotencyKey of an unused key) = %v, %v; want none", list, err)
			}
		})
	}
}
