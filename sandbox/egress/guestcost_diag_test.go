//go:build guestcost

package egress_test

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestGuestLinkCosts (build tag guestcost) runs the link's cost benchmarks
// inside a sandbox on a real VM, where the guest's CPU is what egress
// throughput is made of:
//
//	CGO_ENABLED=0 go test -c -o /tmp/ap.test ./sandbox/agentproto
//	GUESTCOST_BIN=/tmp/ap.test go test -tags guestcost -count=1 -v -run TestGuestLinkCosts ./sandbox/egress/
func TestGuestLinkCosts(t *testing.T) {
	e := newVMEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	f, err := os.Open(os.Getenv("GUESTCOST_BIN"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := e.sbx.WriteFile(ctx, e.actor, e.tenantID, e.sb.ID, "/workspace/ap.test", f, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"grep -o -w -E 'sse4_2|pclmulqdq|popcnt|ssse3|sse4_1|avx|avx2' /proc/cpuinfo | sort -u | tr '\\n' ' '",
		"/workspace/ap.test -test.run '^$' -test.bench 'Link|CRC|Copy32K|COBS|IndexByte' -test.benchtime 300x -test.benchmem",
		"/workspace/ap.test -test.run '^$' -test.bench 'Loopback' -test.benchtime 300x -test.benchmem",
		"nc -l -p 9000 > /dev/null & sleep 1; STOCKADE_BENCH_SINK=127.0.0.1:9000 /workspace/ap.test -test.run '^$' -test.bench 'Loopback/32' -test.benchtime 1000x; wait",
		"nc -l -p 9000 > /dev/null & sleep 1; STOCKADE_BENCH_SINK=127.0.0.1:9000 /workspace/ap.test -test.run '^$' -test.bench 'Loopback/128' -test.benchtime 250x; wait",
		"cat /proc/loadavg",
	} {
		code, out := e.shTB(ctx, t, line)
		t.Logf("%s: exit %d\n%s", line, code, out)
		if code != 0 {
			t.Errorf("Got(exit of %q) = %d; want 0", line, code)
		}
	}
}
