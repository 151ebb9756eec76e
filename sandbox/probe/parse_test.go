package probe_test

import (
	"os/exec"
	"testing"

	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox/probe"
	"github.com/stockade-dev/stockade/tenants/compliance"
)

func TestParse(t *testing.T) {
	out := "# stockade probe: uid 1000\n" +
		"PROBE user blocked uid 1000, CapEff 0000000000000000\r\n" +
		"PROBE internet_proxy escaped internet.test:80 answered through the proxy: HTTP/1.0 200 OK\n" +
		"PROBE memory error memory.max is not visible\n" +
		"PROBE cpu maybe who knows\n" +
		"PROBE\n" +
		"noise PROBE ssh_keys blocked\n"
	got := probe.Parse(out)
	want := []compliance.ProbeCheck{
		{ID: "user", Outcome: compliance.OutcomeBlocked, Detail: "uid 1000, CapEff 0000000000000000"},
		{ID: "internet_proxy", Outcome: compliance.OutcomeEscaped, Detail: "internet.test:80 answered through the proxy: HTTP/1.0 200 OK"},
		{ID: "memory", Outcome: compliance.OutcomeError, Detail: "memory.max is not visible"},
		{ID: "cpu", Outcome: compliance.OutcomeError, Detail: `unknown outcome "maybe": who knows`},
	}
	if len(got) != len(want) {
		t.Fatalf("Got(Parse) = %+v; want %d checks", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.ID || g.Outcome != w.Outcome || g.Detail != w.Detail || g.Name != compliance.CheckName(w.ID) {
			t.Errorf("Got(Parse[%d]) = %+v; want %+v named %q", i, g, w, compliance.CheckName(w.ID))
		}
	}
}

func TestHostPort(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:8080", "127.0.0.1:8080"},
		{"https://stockade.example.com", "stockade.example.com:443"},
		{"http://stockade.example.com/base/", "stockade.example.com:80"},
		{"http://[::1]:9000/x", "[::1]:9000"},
		{"ftp://x", ""},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := probe.HostPort(tc.in); got != tc.want {
				t.Errorf("Got(HostPort(%q)) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}

// The probe must parse under every shell a template may bring.
func TestScriptParses(t *testing.T) {
	shells := [][]string{{"busybox", "sh"}, {"dash"}, {"bash", "--posix"}}
	for _, sh := range shells {
		t.Run(sh[0], func(t *testing.T) {
			path, err := exec.LookPath(sh[0])
			if err != nil {
				hypervisortest.Unavailable(t, sh[0]+" is not installed")
			}
			cmd := exec.Command(path, append(sh[1:], "-n", "/dev/stdin")...)
			cmd.Stdin = bytesReader(probe.Script())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("Got(%s -n probe.sh) = %v: %s; want no syntax error", sh[0], err, out)
			}
		})
	}
}

func TestDomainShares(t *testing.T) {
	shares, nics, err := probe.DomainShares()
	if err != nil || shares || nics {
		t.Errorf("Got(DomainShares()) = %v, %v, %v; want no host shares, no network device", shares, nics, err)
	}
}
