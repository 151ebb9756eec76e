package agent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// TestSetCgroupLimits: a claim writes the cgroup files a fresh sandbox's
// OCI config makes crun write (ociConfig), with the same values.
func TestSetCgroupLimits(t *testing.T) {
	tests := []struct {
		name   string
		limits agentproto.Limits
		want   map[string]string
	}{
		{"defaults", withDefaults(agentproto.Limits{}), map[string]string{
			"memory.max": "268435456", "memory.swap.max": "0", "pids.max": "256", "cpu.max": "max 100000"}},
		{"all set", withDefaults(agentproto.Limits{VCPUs: 1.5, MemoryMiB: 96, PidsMax: 64, IO: &agentproto.IOLimits{ReadBPS: 1 << 20, ReadIOPS: 100}}),
			map[string]string{"memory.max": "100663296", "memory.swap.max": "0", "pids.max": "64", "cpu.max": "150000 100000",
				"io.max": "254:16 rbps=1048576 riops=100"}},
		{"iops only", withDefaults(agentproto.Limits{VCPUs: 0.25, IO: &agentproto.IOLimits{ReadIOPS: 7}}),
			map[string]string{"memory.max": "268435456", "memory.swap.max": "0", "pids.max": "256", "cpu.max": "25000 100000",
				"io.max": "254:16 riops=7"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := setCgroupLimits(dir, tc.limits, devNum{Major: 254, Minor: 16}); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != len(tc.want) {
				t.Errorf("Got(cgroup files written) = %d; want %d", len(entries), len(tc.want))
			}
			for f, want := range tc.want {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil || string(b) != want {
					t.Errorf("Got(%s) = %q, %v; want %q", f, b, err, want)
				}
			}
			// The same values as a fresh sandbox's OCI config.
			res := ociConfig(bundleSpec{Limits: tc.limits, TemplateDevice: devNum{Major: 254, Minor: 16}}).Linux.Resources
			if *res.Memory.Limit != int64(tc.limits.MemoryMiB)<<20 || res.Pids.Limit != int64(tc.limits.PidsMax) {
				t.Errorf("Got(ociConfig resources) = %+v; want the limits", res)
			}
			if res.CPU != nil && tc.want["cpu.max"] != strconv.FormatInt(*res.CPU.Quota, 10)+" 100000" {
				t.Errorf("Got(ociConfig cpu quota) = %d; want cpu.max %q", *res.CPU.Quota, tc.want["cpu.max"])
			}
		})
	}
	if err := setCgroupLimits(filepath.Join(t.TempDir(), "gone"), withDefaults(agentproto.Limits{}), devNum{}); err == nil {
		t.Error("Got(setCgroupLimits(missing cgroup)) = nil; want an error (the claim falls back to a fresh create)")
	}
}

// TestExecEnv: a claimed sandbox's commands get the claim's env, then the
// command's own (a later KEY= wins, as in sandbox-init's merge).
func TestExecEnv(t *testing.T) {
	fresh := &sandbox{}
	if got := fresh.execEnv([]string{"A=1"}); !slices.Equal(got, []string{"A=1"}) {
		t.Errorf("Got(fresh execEnv) = %v; want the command's env only", got)
	}
	claimed := &sandbox{claimEnv: []string{"SSL_CERT_FILE=/etc/stockade/ca.pem", "GREETING=claim"}}
	got := claimed.execEnv([]string{"GREETING=cmd"})
	if want := []string{"SSL_CERT_FILE=/etc/stockade/ca.pem", "GREETING=claim", "GREETING=cmd"}; !slices.Equal(got, want) {
		t.Errorf("Got(claimed execEnv) = %v; want %v", got, want)
	}
	if len(claimed.claimEnv) != 2 {
		t.Errorf("Got(claimEnv after execEnv) = %v; want it unchanged", claimed.claimEnv)
	}
}

// TestConfigurePrestartRefuses: bad pool configurations are refused and
// change nothing.
func TestConfigurePrestartRefuses(t *testing.T) {
	m := &Manager{}
	for _, bad := range []agentproto.PrestartConfig{
		{PerTemplate: -1},
		{PerTemplate: agentproto.MaxPrestartPerTemplate + 1},
		{PerTemplate: 1, Templates: []string{"../x"}},
		{PerTemplate: 1, Templates: make([]string, agentproto.MaxPrestartTemplates+1)},
	} {
		if _, err := m.ConfigurePrestart(bad); !errors.Is(err, agentproto.ErrBadRequest) {
			t.Errorf("Got(ConfigurePrestart(%+v)) = %v; want ErrBadRequest", bad, err)
		}
	}
	st, err := m.ConfigurePrestart(agentproto.PrestartConfig{Query: true})
	if err != nil || st.PerTemplate != 0 || len(st.Pools) != 0 {
		t.Errorf("Got(pool after refusals) = %+v, %v; want none", st, err)
	}
	if !claimable(agentproto.SandboxSpec{ID: "a"}) || claimable(agentproto.SandboxSpec{ID: "a", Volumes: []agentproto.VolumeBind{{ID: "v"}}}) {
		t.Error("Got(claimable) wrong; want a spec without volumes claimable, one with volumes not")
	}
}
