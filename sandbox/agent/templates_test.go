package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestExt4Label(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("mkfs.ext4 not installed")
		}
		t.Skip("mkfs.ext4 not installed")
	}
	dir := t.TempDir()
	tests := []struct{ label, want string }{
		{"stockade-busybox", "stockade-busybox"},
		{"other", "other"},
	}
	for _, tc := range tests {
		img := filepath.Join(dir, tc.label+".img")
		if err := os.WriteFile(img, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 8<<20); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", tc.label, img).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4: %v: %s", err, out)
		}
		if got, err := ext4Label(img); err != nil || got != tc.want {
			t.Errorf("Got(ext4Label(%s)) = %q, %v; want %q", tc.label, got, err, tc.want)
		}
	}
	// Not ext4: no label, no error.
	plain := filepath.Join(dir, "zeros")
	os.WriteFile(plain, make([]byte, 4096), 0o644)
	if got, err := ext4Label(plain); err != nil || got != "" {
		t.Errorf("Got(ext4Label(zeros)) = %q, %v; want \"\", nil", got, err)
	}
}

func TestDeviceNumber(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dev")
	os.WriteFile(p, []byte("254:16\n"), 0o644)
	if got, err := deviceNumber(p); err != nil || got != (devNum{254, 16}) {
		t.Errorf("Got(deviceNumber()) = %v, %v; want 254:16", got, err)
	}
	os.WriteFile(p, []byte("junk\n"), 0o644)
	if _, err := deviceNumber(p); err == nil {
		t.Error("Got(deviceNumber(junk)) = nil error; want one")
	}
}

func TestCgroupParsers(t *testing.T) {
	kv := parseKeyed("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_throttled 2\nbad line here\n")
	if kv["usage_usec"] != 1500 || kv["nr_throttled"] != 2 || len(kv) != 4 {
		t.Errorf("Got(parseKeyed()) = %v; want 4 keys", kv)
	}
	r, w, ri, wi := parseIOStat("254:16 rbytes=4096 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n254:0 rbytes=10 wbytes=20 rios=3 wios=4\n")
	if r != 4106 || w != 20 || ri != 4 || wi != 4 {
		t.Errorf("Got(parseIOStat()) = %d %d %d %d; want 4106 20 4 4", r, w, ri, wi)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "memory.max"), []byte("max\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "pids.max"), []byte("64\n"), 0o644)
	if v, err := readUint(filepath.Join(dir, "memory.max")); err != nil || v != 0 {
		t.Errorf("Got(readUint(max)) = %d, %v; want 0 (no limit)", v, err)
	}
	if v, err := readUint(filepath.Join(dir, "pids.max")); err != nil || v != 64 {
		t.Errorf("Got(readUint(64)) = %d, %v; want 64", v, err)
	}
}
