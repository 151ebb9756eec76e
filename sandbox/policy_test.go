package sandbox

import (
	"errors"
	"testing"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
)

// TestSpecPolicy: the tenant policy's defaults fill a spec and its bounds
// refuse one above them, naming the field and the policy version.
func TestSpecPolicy(t *testing.T) {
	tpls := []image.Template{{Name: "busybox", Version: "b1"}}
	pool := vmpool.Pool{VCPUs: 4, MemoryMiB: 4096}
	doc := policy.Defaults()
	doc.Resources.MaxVCPUs, doc.Resources.MaxMemoryMiB, doc.Resources.DefaultMemoryMiB = 2, 512, 96
	doc.Lifetime.MaxTimeoutSeconds, doc.Lifetime.DefaultTimeoutSeconds, doc.Lifetime.MaxIdleTimeoutSeconds = 600, 300, 120
	pol := policy.Version{Version: 7, Doc: doc}
	cfg := testConfig().withPolicy(doc)
	tests := []struct {
		name  string
		spec  Spec
		field string // "" means allowed
	}{
		{"defaults from the policy", Spec{}, ""},
		{"at the bounds", Spec{VCPUs: 2, MemoryMiB: 512, TimeoutSeconds: 600, IdleTimeoutSeconds: 120}, ""},
		{"vcpus over", Spec{VCPUs: 3}, "vcpus"},
		{"memory over", Spec{MemoryMiB: 513}, "memory_mib"},
		{"lifetime over", Spec{TimeoutSeconds: 601}, "timeout_seconds"},
		{"idle over", Spec{TimeoutSeconds: 600, IdleTimeoutSeconds: 121}, "idle_timeout_seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := tt.spec.resolve(cfg, tpls, pool)
			if err != nil {
				t.Fatalf("Got(resolve) = %v; want valid", err)
			}
			err = lim.checkPolicy(pol)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Got(checkPolicy) = %v; want allowed", err)
				}
				if tt.name == "defaults from the policy" && (lim.MemoryMiB != 96 || lim.TimeoutSeconds != 300) {
					t.Errorf("Got(defaults) = %d MiB, %d s; want the policy's 96 MiB, 300 s", lim.MemoryMiB, lim.TimeoutSeconds)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || fe.Rule != "policy" {
				t.Fatalf("Got(checkPolicy) = %v; want a policy error on %s", err, tt.field)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Got(errors.Is(err, ErrInvalid)) = false; want true")
			}
		})
	}
}
