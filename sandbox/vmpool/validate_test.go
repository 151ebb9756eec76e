package vmpool

import (
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestPoolSettingsValidateAll: every setting out of range is named, in the
// settings' order, not just the first.
func TestPoolSettingsValidateAll(t *testing.T) {
	cases := []struct {
		name string
		in   PoolSettings
		want string
	}{
		{"all bad", PoolSettings{VCPUs: 0, MemoryMiB: 1, MaxVMs: -1, WarmVMs: -1, RecycleAfterHours: -1}, "vcpus,memory_mib,max_vms,warm_vms,recycle_after_hours"},
		{"warm above max", PoolSettings{VCPUs: 1, MemoryMiB: MinMemoryMiB, MaxVMs: 1, WarmVMs: 2}, "warm_vms"},
		{"good", PoolSettings{VCPUs: 1, MemoryMiB: MinMemoryMiB, MaxVMs: 2, WarmVMs: 1}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, fe := range errdefs.FieldErrors(c.in.Validate()) {
				got = append(got, fe.Field)
			}
			if strings.Join(got, ",") != c.want {
				t.Errorf("Got(fields at fault) = %v; want %s", got, c.want)
			}
		})
	}
}
