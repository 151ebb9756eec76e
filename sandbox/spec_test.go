package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

func testConfig() Config {
	c := Config{DataDir: "/nonexistent"}
	c.checkAndSetDefaults()
	return c
}

// TestSpecResolve: each bad spec names the field at fault; a good one gets
// the defaults.
func TestSpecResolve(t *testing.T) {
	tpls := []image.Template{{Name: "busybox", Version: "b1"}, {Name: "debian", Version: "d1"}}
	pool := vmpool.Pool{VCPUs: 2, MemoryMiB: 1024}
	cfg := testConfig()
	tests := []struct {
		name  string
		spec  Spec
		field string // "" means valid
	}{
		{"defaults", Spec{}, ""},
		{"unknown template", Spec{Template: "nope"}, "template"},
		{"template with path", Spec{Template: "../busybox"}, "template"},
		{"negative vcpus", Spec{VCPUs: -1}, "vcpus"},
		{"vcpus above the vm", Spec{VCPUs: 3}, "vcpus"},
		{"memory below minimum", Spec{MemoryMiB: 8}, "memory_mib"},
		{"memory above the vm", Spec{MemoryMiB: 1024 - cfg.GuestReserveMiB + 1}, "memory_mib"},
		{"memory exactly the vm's room", Spec{MemoryMiB: 1024 - cfg.GuestReserveMiB}, ""},
		{"negative timeout", Spec{TimeoutSeconds: -5}, "timeout_seconds"},
		{"timeout over a week", Spec{TimeoutSeconds: MaxTimeoutSeconds + 1}, "timeout_seconds"},
		{"idle above lifetime", Spec{TimeoutSeconds: 60, IdleTimeoutSeconds: 61}, "idle_timeout_seconds"},
		{"env key with =", Spec{Env: map[string]string{"A=B": "x"}}, "env"},
		{"env key starting with a digit", Spec{Env: map[string]string{"1A": "x"}}, "env"},
		{"env value with NUL", Spec{Env: map[string]string{"A": "x\x00y"}}, "env"},
		{"metadata key with space", Spec{Metadata: map[string]string{"a b": "x"}}, "metadata"},
		{"metadata value too long", Spec{Metadata: map[string]string{"a": strings.Repeat("x", maxMetadataValue+1)}}, "metadata"},
		{"all set", Spec{Template: "busybox", VCPUs: 2, MemoryMiB: 256, TimeoutSeconds: 60, IdleTimeoutSeconds: 30,
			Env: map[string]string{"TOKEN": "x"}, Metadata: map[string]string{"task": "t-1"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.spec.resolve(cfg, tpls, pool)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Got(resolve) = %v; want valid", err)
				}
				if got.Template == "" || got.VCPUs < 1 || got.MemoryMiB < MinMemoryMiB || got.TimeoutSeconds < 1 || got.TemplateVersion == "" {
					t.Errorf("Got(resolved) = %+v; want every default filled", got)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("Got(resolve) = %v; want a field error on %s", err, tt.field)
			}
		})
	}
	t.Run("default template falls back to the first built", func(t *testing.T) {
		got, err := Spec{}.resolve(cfg, tpls[:1], pool)
		if err != nil || got.Template != "busybox" {
			t.Errorf("Got(resolve with only busybox) = %+v, %v; want busybox", got.Template, err)
		}
	})
	t.Run("small vms shrink the default memory", func(t *testing.T) {
		got, err := Spec{}.resolve(cfg, tpls, vmpool.Pool{VCPUs: 1, MemoryMiB: 256})
		if err != nil || got.MemoryMiB != 256-cfg.GuestReserveMiB {
			t.Errorf("Got(memory on a 256 MiB vm) = %d, %v; want %d", got.MemoryMiB, err, 256-cfg.GuestReserveMiB)
		}
	})
}

func TestCheckPath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"/workspace/a.txt", true},
		{"a/b/c.txt", true},
		{"/etc/hostname", true},
		{"..foo/bar", true}, // a name that starts with dots is not a climb
		{"", false},
		{"../etc/passwd", false},
		{"/workspace/../../etc/shadow", false},
		{"a/..", false},
		{"a\x00b", false},
		{"dir/", false},
		{strings.Repeat("a", maxPathBytes+1), false},
	}
	for _, tt := range tests {
		err := checkPath(tt.path)
		if (err == nil) != tt.ok {
			t.Errorf("Got(checkPath(%q)) = %v; want ok %v", tt.path, err, tt.ok)
		}
		var fe *errdefs.FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Field != "path") {
			t.Errorf("Got(checkPath(%q)) = %v; want a field error on path", tt.path, err)
		}
	}
}

func TestExecRequestCheck(t *testing.T) {
	cfg := testConfig()
	tests := []struct {
		name  string
		req   ExecRequest
		field string
	}{
		{"ok", ExecRequest{Cmd: []string{"ls", "-l"}}, ""},
		{"no command", ExecRequest{}, "cmd"},
		{"empty program", ExecRequest{Cmd: []string{"", "x"}}, "cmd"},
		{"NUL in an argument", ExecRequest{Cmd: []string{"echo", "a\x00b"}}, "cmd"},
		{"huge argv", ExecRequest{Cmd: []string{"echo", strings.Repeat("x", maxArgvBytes)}}, "cmd"},
		{"cwd with NUL", ExecRequest{Cmd: []string{"ls"}, Cwd: "/a\x00"}, "cwd"},
		{"bad env", ExecRequest{Cmd: []string{"ls"}, Env: map[string]string{"": "x"}}, "env"},
		{"negative timeout", ExecRequest{Cmd: []string{"ls"}, TimeoutSeconds: -1}, "timeout_seconds"},
		{"stdin too big", ExecRequest{Cmd: []string{"cat"}, Stdin: make([]byte, cfg.MaxStdinBytes+1)}, "stdin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			err := req.check(cfg)
			if tt.field == "" {
				if err != nil || req.TimeoutSeconds != cfg.DefaultExecTimeoutSeconds {
					t.Errorf("Got(check) = %v, timeout %d; want ok with the default timeout", err, req.TimeoutSeconds)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("Got(check) = %v; want a field error on %s", err, tt.field)
			}
		})
	}
}

func TestCapture(t *testing.T) {
	c := newCapture(8)
	c.Write([]byte("hello "))
	c.Write([]byte("wörld\x00!"))
	got, total := c.text()
	if total != 14 || !c.truncated() || !strings.HasPrefix(got, "hello w") || strings.ContainsRune(got, 0) {
		t.Errorf("Got(capture) = %q, %d, truncated %v; want the first 8 bytes as text, 14 in all, truncated", got, total, c.truncated())
	}
}
