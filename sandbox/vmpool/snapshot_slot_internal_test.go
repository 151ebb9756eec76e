package vmpool

import (
	"strings"
	"testing"
)

// TestSnapshotSlotPerTenant: by default each tenant's VMs restore from a
// snapshot of their own (two tenants never share the guest kernel's
// boot-time secrets); shared snapshots serve every tenant of a shape.
func TestSnapshotSlotPerTenant(t *testing.T) {
	a := VM{TenantID: "tenant-a", MemoryMiB: 512, VCPUs: 1}
	b := VM{TenantID: "tenant-b", MemoryMiB: 512, VCPUs: 1}
	a2 := VM{TenantID: "tenant-a", MemoryMiB: 1024, VCPUs: 1}
	tests := []struct {
		name   string
		shared bool
		x, y   VM
		same   bool
	}{
		{"per tenant: two tenants", false, a, b, false},
		{"per tenant: one tenant, one shape", false, a, a, true},
		{"per tenant: one tenant, two shapes", false, a, a2, false},
		{"shared: two tenants", true, a, b, true},
		{"shared: two shapes", true, a, a2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Service{cfg: Config{SnapshotsShared: tt.shared}}
			sx, sy := s.snapshotSlot(tt.x), s.snapshotSlot(tt.y)
			if (sx == sy) != tt.same {
				t.Errorf("Got(slots) = %q, %q; want same %v", sx, sy, tt.same)
			}
			kx := snapshotKey{Tenant: s.snapshotTenant(tt.x), MemoryMiB: tt.x.MemoryMiB, VCPUs: tt.x.VCPUs}
			ky := snapshotKey{Tenant: s.snapshotTenant(tt.y), MemoryMiB: tt.y.MemoryMiB, VCPUs: tt.y.VCPUs}
			if (kx.sum() == ky.sum()) != tt.same {
				t.Errorf("Got(keys equal) = %v; want %v", kx.sum() == ky.sum(), tt.same)
			}
			if strings.Contains(sx, "tenant-") {
				t.Errorf("Got(slot) = %q; want the tenant hashed, not named, in a host's file names", sx)
			}
		})
	}
}
