package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// TestGuestCapacity: the agent's default cap is the capacity rule of its
// MemTotal, the rule the host plans with.
func TestGuestCapacity(t *testing.T) {
	tests := []struct {
		name, meminfo string
		want          int
		wantErr       bool
	}{
		{"2 GiB guest", "MemTotal:        2014208 kB\nMemAvailable:    1900000 kB\n", agentproto.SandboxCapacity(1967), false},
		{"512 MiB guest", "MemTotal:         468416 kB\nMemAvailable:     422208 kB\n", agentproto.SandboxCapacity(457), false},
		{"garbage", "MemTotal: lots\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "meminfo")
			if err := os.WriteFile(p, []byte(tt.meminfo), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := guestCapacity(p)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Got(guestCapacity) = %d, %v; want %d (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
	if _, err := guestCapacity(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Errorf("Got(guestCapacity of a missing file) = nil error; want one")
	}
}
