package usage_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// TestLabels: user names and meters are read per tenant; another tenant's
// never come back.
func TestLabels(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			ts := tenants.NewStore(d.DB, nil)
			actor := audit.Actor{Kind: audit.ActorSystem, ID: "labels-test"}
			a, err := ts.CreateTenant(ctx, actor, "labels-a", "")
			if err != nil {
				t.Fatal(err)
			}
			b, err := ts.CreateTenant(ctx, actor, "labels-b", "")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
			for _, m := range []usage.Meter{
				{SandboxID: "sb-a1", TenantID: a.ID, Template: "busybox", UserID: "u-ada", UserName: "ada@a.test", VCPUs: 1, MemoryMiB: 64, StartedAt: start},
				{SandboxID: "sb-a2", TenantID: a.ID, Template: "debian", UserID: "u-tok", UserName: "", VCPUs: 2, MemoryMiB: 128, StartedAt: start},
				{SandboxID: "sb-b1", TenantID: b.ID, Template: "secret", UserID: "u-zed", UserName: "zed@b.test", VCPUs: 1, MemoryMiB: 64, StartedAt: start},
			} {
				if err := d.DB.Transaction(func(tx *gorm.DB) error { return usage.Open(tx, m) }); err != nil {
					t.Fatal(err)
				}
			}
			st := usage.NewStore(d.DB, nil)
			names, err := st.UserNames(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(names) != 1 || names["u-ada"] != "ada@a.test" {
				t.Errorf("Got(UserNames(A)) = %v; want only u-ada (u-tok has no name, u-zed is B's)", names)
			}
			ms, err := st.Meters(ctx, a.ID, []string{"sb-a1", "sb-a2", "sb-b1", "sb-none"})
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 2 || ms["sb-a1"].Template != "busybox" || ms["sb-a2"].VCPUs != 2 {
				t.Errorf("Got(Meters(A)) = %v; want sb-a1 and sb-a2 only", ms)
			}
			if ms, err := st.Meters(ctx, a.ID, nil); err != nil || len(ms) != 0 {
				t.Errorf("Got(Meters(A, none)) = %v, %v; want empty", ms, err)
			}
		})
	}
}
