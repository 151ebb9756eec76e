package tenants_test

import (
	"errors"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

func TestQuotaDefaultsLazily(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "quota-lazy")
		countRows := func() int64 {
			var n int64
			if err := e.db.Table("tenant_quotas").Where("tenant_id = ?", tn.ID).Count(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := countRows(); n != 0 {
			t.Fatalf("Got(quota rows before first read) = %d; want 0", n)
		}
		q, err := e.store.Quota(ctx, tn.ID)
		if err != nil {
			t.Fatalf("Quota = %v", err)
		}
		want := tenants.DefaultQuota()
		if q.MaxVMs != want.MaxVMs || q.MaxVCPUs != want.MaxVCPUs || q.MaxMemoryMiB != want.MaxMemoryMiB || q.MaxSandboxes != want.MaxSandboxes {
			t.Errorf("Got(Quota) = %+v; want the defaults %+v", q, want)
		}
		if n := countRows(); n != 1 {
			t.Errorf("Got(quota rows after first read) = %d; want 1", n)
		}
		if _, err := e.store.Quota(ctx, tn.ID); err != nil {
			t.Fatalf("second Quota = %v", err)
		}
		if n := countRows(); n != 1 {
			t.Errorf("Got(quota rows after second read) = %d; want 1", n)
		}
		if _, err := e.store.Quota(ctx, "no-such-tenant"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(Quota(missing tenant)) = %v; want errdefs.ErrNotFound", err)
		}
	})
}

func TestQuotaConcurrentFirstReads(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "quota-race")
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.store.Quota(ctx, tn.ID)
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("concurrent Quota = %v", err)
			}
		}
		var n int64
		e.db.Table("tenant_quotas").Where("tenant_id = ?", tn.ID).Count(&n)
		if n != 1 {
			t.Errorf("Got(quota rows) = %d; want 1", n)
		}
	})
}

func TestSetQuota(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "quota-set")
		op := audit.Actor{Kind: audit.ActorUser, ID: "u-op", Name: "op@example.com"}
		in := tenants.Quota{MaxVMs: 2, MaxVCPUs: 3, MaxMemoryMiB: 1024, MaxSandboxes: 5}
		got, err := e.store.SetQuota(ctx, op, tn.ID, in)
		if err != nil {
			t.Fatalf("SetQuota = %v", err)
		}
		again, err := e.store.Quota(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if again != got || again.MaxVCPUs != 3 || again.UpdatedBy != "u-op" {
			t.Errorf("Got(Quota after SetQuota) = %+v; want %+v", again, got)
		}
		evs := e.events(t, tn.ID, audit.TypeQuotaUpdated)
		if len(evs) != 1 || evs[0].Code != "ST2002I" || evs[0].ActorID != "u-op" {
			t.Fatalf("Got(quota audit events) = %+v; want one by u-op", evs)
		}

		bad := []struct {
			name  string
			q     tenants.Quota
			field string
		}{
			{"negative vms", tenants.Quota{MaxVMs: -1}, tenants.QuotaMaxVMs},
			{"huge vcpus", tenants.Quota{MaxVCPUs: 1 << 20}, tenants.QuotaMaxVCPUs},
			{"negative memory", tenants.Quota{MaxMemoryMiB: -5}, tenants.QuotaMaxMemoryMiB},
			{"huge sandboxes", tenants.Quota{MaxSandboxes: 1 << 30}, tenants.QuotaMaxSandboxes},
		}
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				before := countAll(t, e.db)
				_, err := e.store.SetQuota(ctx, op, tn.ID, tc.q)
				wantField(t, err, tc.field, "range")
				if after := countAll(t, e.db); after != before {
					t.Errorf("Got(rows after rejected SetQuota) = %v; want %v", after, before)
				}
			})
		}
		if _, err := e.store.SetQuota(ctx, op, "no-such-tenant", in); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(SetQuota(missing tenant)) = %v; want errdefs.ErrNotFound", err)
		}
	})
}

// countAll counts the quota rows and audit events: what SetQuota writes.
func countAll(t *testing.T, db *gorm.DB) [2]int64 {
	t.Helper()
	var out [2]int64
	for i, table := range []string{"tenant_quotas", "audit_events"} {
		if err := db.Table(table).Count(&out[i]).Error; err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestQuotaCheck(t *testing.T) {
	q := tenants.Quota{MaxVMs: 2, MaxVCPUs: 4, MaxMemoryMiB: 2048, MaxSandboxes: 3}
	tests := []struct {
		name  string
		u     tenants.Usage
		quota string // "" means within quota
	}{
		{"empty", tenants.Usage{}, ""},
		{"at every limit", tenants.Usage{VMs: 2, VCPUs: 4, MemoryMiB: 2048, Sandboxes: 3}, ""},
		{"one vm too many", tenants.Usage{VMs: 3}, tenants.QuotaMaxVMs},
		{"vcpus", tenants.Usage{VMs: 1, VCPUs: 5}, tenants.QuotaMaxVCPUs},
		{"memory", tenants.Usage{VMs: 1, VCPUs: 1, MemoryMiB: 4096}, tenants.QuotaMaxMemoryMiB},
		{"sandboxes", tenants.Usage{Sandboxes: 4}, tenants.QuotaMaxSandboxes},
		{"vms reported first", tenants.Usage{VMs: 9, VCPUs: 9}, tenants.QuotaMaxVMs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := q.Check(tc.u)
			if tc.quota == "" {
				if err != nil {
					t.Errorf("Got(Check(%+v)) = %v; want nil", tc.u, err)
				}
				return
			}
			var qe *errdefs.QuotaError
			if !errors.As(err, &qe) || qe.Quota != tc.quota {
				t.Fatalf("Got(Check(%+v)) = %v; want *errdefs.QuotaError naming %s", tc.u, err, tc.quota)
			}
			if !errors.Is(err, errdefs.ErrQuota) {
				t.Errorf("errors.Is(%v, errdefs.ErrQuota) = false; want true", err)
			}
		})
	}
}
