package agent

import (
	"crypto/rand"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// TestReseedRandom reseeds the running kernel's CRNG for real (the test
// host's: mixing 64 random bytes into its pool and reseeding it is harmless)
// and checks the ioctls reach a random device and nothing else.
func TestReseedRandom(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("RNDADDENTROPY and RNDRESEEDCRNG need CAP_SYS_ADMIN: needs root")
		}
		t.Skip("RNDADDENTROPY and RNDRESEEDCRNG need CAP_SYS_ADMIN: needs root")
	}
	seed := make([]byte, 64)
	rand.Read(seed)
	tests := []struct {
		name    string
		path    string
		seed    []byte
		wantErr error
	}{
		{"/dev/random", "/dev/random", seed, nil},
		{"/dev/urandom", "/dev/urandom", seed, nil},
		{"the largest seed", "/dev/random", make([]byte, agentproto.MaxIdentitySeed), nil},
		{"not a random device", "/dev/null", seed, unix.ENOTTY},
		{"no such device", "/dev/no-such-random", seed, os.ErrNotExist},
		{"empty seed", "/dev/random", nil, agentproto.ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ReseedRandom(tc.path, tc.seed)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Got(ReseedRandom(%s)) = %v; want nil", tc.path, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Got(ReseedRandom(%s)) = %v; want %v", tc.path, err, tc.wantErr)
			}
		})
	}
}

// TestRealKernelOnlyForPID1: only the VM's init gets the real clock and
// RNG; a server run anywhere else gets none unless it is handed one.
func TestRealKernelOnlyForPID1(t *testing.T) {
	fake := &KernelControl{Reseed: func([]byte) error { return nil }, SetClock: SetRealtime}
	tests := []struct {
		name     string
		cfg      Config
		wantReal bool
		wantNone bool
	}{
		{"pid 1", Config{PID1: true}, true, false},
		{"not pid 1", Config{}, false, true},
		{"not pid 1, handed one", Config{Kernel: fake}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.PowerOff = func() error { return nil }
			s, err := NewServer(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			k := s.cfg.Kernel
			if got := k == nil; got != tc.wantNone {
				t.Fatalf("Got(no kernel control) = %v; want %v", got, tc.wantNone)
			}
			if tc.wantReal && (k.Reseed == nil || k.SetClock == nil) {
				t.Errorf("Got(PID 1's kernel control) = %+v; want both set", k)
			}
			if !tc.wantReal && !tc.wantNone && k != fake {
				t.Errorf("Got(kernel control) = %p; want the one handed in (%p)", k, fake)
			}
		})
	}
}
