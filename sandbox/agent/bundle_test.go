package agent

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json golden files")

func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Got(%s) differs from the golden file; run with -update after checking:\n%s", name, got)
	}
}

func TestOCIConfigGolden(t *testing.T) {
	tests := []struct {
		name string
		spec bundleSpec
	}{
		{"config-defaults.json", bundleSpec{
			InitPath: "/init", Env: sandboxEnv(nil), Limits: withDefaults(agentproto.Limits{}),
			CgroupPath: "/stockade/sb-1", TemplateDevice: devNum{254, 16},
		}},
		{"config-limits.json", bundleSpec{
			Hostname: "agent-7", InitPath: "/init", Env: sandboxEnv([]string{"FOO=bar", "HOME=/workspace"}),
			Limits: withDefaults(agentproto.Limits{VCPUs: 1.5, MemoryMiB: 512, PidsMax: 100, DiskMiB: 64, WorkspaceMiB: 1024,
				IO: &agentproto.IOLimits{ReadBPS: 10 << 20, ReadIOPS: 500}}),
			CgroupPath: "/stockade/sb-2", TemplateDevice: devNum{254, 32},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, tc.name, ociConfig(tc.spec))
		})
	}
}

func TestBaselineConfigGolden(t *testing.T) {
	golden(t, "baseline.json", baselineConfig("/run/stockade/templates/busybox", "/stockade/baseline-1", []string{"/bin/echo", "ready"}))
}

// TestOCIConfigInvariants checks what must hold for every sandbox, whatever
// the golden files say.
func TestOCIConfigInvariants(t *testing.T) {
	c := ociConfig(bundleSpec{InitPath: "/init", Limits: withDefaults(agentproto.Limits{VCPUs: 2}), CgroupPath: "/stockade/x"})
	p := c.Process
	if p.User.UID == 0 || p.User.GID == 0 {
		t.Errorf("Got(user) = %d:%d; want non-root", p.User.UID, p.User.GID)
	}
	if !p.NoNewPrivileges {
		t.Error("Got(noNewPrivileges) = false; want true")
	}
	caps := p.Capabilities
	for name, set := range map[string][]string{"bounding": caps.Bounding, "effective": caps.Effective,
		"inheritable": caps.Inheritable, "permitted": caps.Permitted, "ambient": caps.Ambient} {
		if set == nil || len(set) != 0 {
			t.Errorf("Got(capabilities.%s) = %#v; want an empty list", name, set)
		}
	}
	var ns []string
	for _, n := range c.Linux.Namespaces {
		ns = append(ns, n.Type)
	}
	for _, want := range []string{"pid", "network", "ipc", "uts", "mount", "cgroup"} {
		if !slices.Contains(ns, want) {
			t.Errorf("Got(namespaces) = %v; want %s", ns, want)
		}
	}
	if slices.Contains(ns, "user") {
		t.Errorf("Got(namespaces) = %v; want no user namespace (see doc.go)", ns)
	}
	r := c.Linux.Resources
	if r.Memory == nil || *r.Memory.Limit != defaultMemoryMiB<<20 || *r.Memory.Swap != *r.Memory.Limit {
		t.Errorf("Got(memory) = %+v; want limit %d MiB and no swap", r.Memory, defaultMemoryMiB)
	}
	if r.CPU == nil || *r.CPU.Quota != 200000 || *r.CPU.Period != 100000 {
		t.Errorf("Got(cpu) = %+v; want 200000/100000", r.CPU)
	}
	if r.Pids == nil || r.Pids.Limit != defaultPidsMax {
		t.Errorf("Got(pids) = %+v; want %d", r.Pids, defaultPidsMax)
	}
	if r.Devices[0].Allow || r.Devices[0].Access != "rwm" || r.Devices[0].Major != nil {
		t.Errorf("Got(first device rule) = %+v; want deny all", r.Devices[0])
	}
	init := c.Mounts[len(c.Mounts)-1]
	if init.Destination != initMount || init.Source != "/init" || !slices.Contains(init.Options, "ro") {
		t.Errorf("Got(init mount) = %+v; want /init read-only at %s", init, initMount)
	}
	if c.Root.Path != "rootfs" || p.Args[0] != initMount || p.Args[1] != "sandbox-init" {
		t.Errorf("Got(root, args) = %+v, %v; want rootfs and %s sandbox-init", c.Root, p.Args, initMount)
	}
}

func TestSeccompProfile(t *testing.T) {
	prof := seccompProfile()
	if prof.DefaultAction != "SCMP_ACT_ALLOW" {
		t.Errorf("Got(defaultAction) = %s; want SCMP_ACT_ALLOW (a deny list)", prof.DefaultAction)
	}
	for _, arch := range []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"} {
		if !slices.Contains(prof.Architectures, arch) {
			t.Errorf("Got(architectures) = %v; want %s", prof.Architectures, arch)
		}
	}
	// Every syscall the brief names is denied unconditionally with EPERM.
	unconditional := map[string]bool{}
	for _, s := range prof.Syscalls {
		if len(s.Args) == 0 && s.Action == "SCMP_ACT_ERRNO" && *s.ErrnoRet == errnoEPERM {
			for _, n := range s.Names {
				unconditional[n] = true
			}
		}
	}
	for _, name := range []string{"mount", "umount2", "kexec_load", "kexec_file_load", "bpf", "keyctl", "add_key",
		"request_key", "init_module", "finit_module", "delete_module", "ptrace", "perf_event_open",
		"open_by_handle_at", "setns", "pivot_root", "swapon", "swapoff", "reboot", "acct"} {
		if !unconditional[name] {
			t.Errorf("Got(seccomp) without an unconditional EPERM for %s; want one", name)
		}
	}
	// Conditional rules: user namespaces, packet and raw sockets.
	// Conditional rules: every argument of a rule must match (AND).
	type rule struct {
		name string
		args string
	}
	var rules []rule
	for _, s := range prof.Syscalls {
		if len(s.Args) > 0 {
			b, _ := json.Marshal(s.Args)
			rules = append(rules, rule{s.Names[0], string(b)})
		}
	}
	rawInet := func(family uint64) string {
		b, _ := json.Marshal([]ociSysArg{{Index: 0, Value: family, Op: "SCMP_CMP_EQ"},
			{Index: 1, Value: sockTypeMask, ValueTwo: sockRaw, Op: "SCMP_CMP_MASKED_EQ"}})
		return string(b)
	}
	one := func(a ociSysArg) string { b, _ := json.Marshal([]ociSysArg{a}); return string(b) }
	for _, want := range []rule{
		{"unshare", one(ociSysArg{Index: 0, Value: cloneNewUser, ValueTwo: cloneNewUser, Op: "SCMP_CMP_MASKED_EQ"})},
		{"clone", one(ociSysArg{Index: 0, Value: cloneNewUser, ValueTwo: cloneNewUser, Op: "SCMP_CMP_MASKED_EQ"})},
		{"socket", one(ociSysArg{Index: 0, Value: afPacket, Op: "SCMP_CMP_EQ"})},
		{"socket", rawInet(afInet)},
		{"socket", rawInet(afInet6)},
	} {
		if !slices.Contains(rules, want) {
			t.Errorf("Got(seccomp conditional rules) = %+v; want %+v", rules, want)
		}
	}
	// Netlink's SOCK_RAW must stay allowed (ip, ss): no rule on the type alone.
	for _, r := range rules {
		if r.name == "socket" && r.args == one(ociSysArg{Index: 1, Value: sockTypeMask, ValueTwo: sockRaw, Op: "SCMP_CMP_MASKED_EQ"}) {
			t.Errorf("Got(seccomp rule %v); want raw sockets denied per address family only", r)
		}
	}
}

func TestCheckLimits(t *testing.T) {
	tests := []struct {
		name   string
		limits agentproto.Limits
		ok     bool
	}{
		{"defaults", agentproto.Limits{}, true},
		{"fractional cpus", agentproto.Limits{VCPUs: 0.5}, true},
		{"negative cpus", agentproto.Limits{VCPUs: -1}, false},
		{"tiny memory", agentproto.Limits{MemoryMiB: 4}, false},
		{"too few pids", agentproto.Limits{PidsMax: 2}, false},
		{"negative disk", agentproto.Limits{DiskMiB: -1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkLimits(withDefaults(tc.limits))
			if (err == nil) != tc.ok {
				t.Errorf("Got(checkLimits(%+v)) = %v; want ok %v", tc.limits, err, tc.ok)
			}
		})
	}
}
