package sandbox

import (
	"errors"
	"testing"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
)

// TestFileLimit: the tenant policy may lower the platform's per-file limit,
// never raise it, and the limit says where it comes from.
func TestFileLimit(t *testing.T) {
	platform := FileLimit{Bytes: 64 << 20, Setting: SettingMaxFileBytes}
	pol := func(n int) policy.Version {
		doc := policy.Defaults()
		doc.Filesystem.MaxFileBytes = n
		return policy.Version{Version: 7, Doc: doc}
	}
	tests := []struct {
		name string
		pol  policy.Version
		want FileLimit
		text string
	}{
		{"policy as the platform", pol(64 << 20), platform, "64 MiB (67108864 bytes), set by STOCKADE_MAX_FILE_BYTES"},
		{"policy lower", pol(1000), FileLimit{Bytes: 1000, Setting: PolicyMaxFileBytes, PolicyVersion: 7},
			"1000 bytes, set by the tenant policy's filesystem.max_file_bytes (version 7)"},
		{"policy higher", pol(1 << 30), platform, "64 MiB (67108864 bytes), set by STOCKADE_MAX_FILE_BYTES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := platform.withPolicy(tt.pol)
			if got != tt.want || got.String() != tt.text {
				t.Errorf("Got(withPolicy()) = %+v %q; want %+v %q", got, got.String(), tt.want, tt.text)
			}
			err := got.TooLarge("write /workspace/x", 2<<30)
			if !errors.Is(err, errdefs.ErrTooLarge) || err.Error() != "write /workspace/x: too large: 2147483648 bytes, over the limit of "+tt.text {
				t.Errorf("Got(errdefs.TooLargeError) = %q, Is(errdefs.ErrTooLarge) %v; want it to name the limit", err, errors.Is(err, errdefs.ErrTooLarge))
			}
		})
	}
}
