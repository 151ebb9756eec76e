package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// recordedAudit collects audit events.
type recordedAudit struct{ events []audit.Event }

func (r *recordedAudit) Record(_ context.Context, e audit.Event) error {
	r.events = append(r.events, e)
	return nil
}

// TestUnknownSandboxMakesNoCounter: the guest names the sandbox of each
// connection; one that is not an active sandbox of the tenant on that VM
// is refused without a live counter (before the fix every made-up id got
// one, kept for the life of the process), and its audit rate limit is the
// VM's, so varying the id does not multiply audit rows.
func TestUnknownSandboxMakesNoCounter(t *testing.T) {
	au := &recordedAudit{}
	g, err := New(Config{
		Policies: PoliciesFunc(func(context.Context, string) (Rules, int, error) { return Rules{Default: DefaultAllow}, 1, nil }),
		Sandboxes: SandboxesFunc(func(_ context.Context, tenantID, vmID, sandboxID string) error {
			if sandboxID == "sb-1" && vmID == "vm-1" {
				return nil
			}
			return ErrUnknownSandbox
		}),
		Audit: au, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		id := fmt.Sprintf("sb-made-up-%d", i)
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); g.ServeConn(context.Background(), "tenant-1", "vm-1", id, server) }()
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("Got(connection as %s) = %v, %v; want 403", id, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		client.Close()
		<-done
		if up, down := g.Bytes(id); up != 0 || down != 0 {
			t.Errorf("Got(Bytes(%s)) = %d, %d; want 0, 0", id, up, down)
		}
	}
	g.mu.Lock()
	n := len(g.counters)
	g.mu.Unlock()
	if n != 0 {
		t.Errorf("Got(%d live counters) after 20 made-up sandbox ids; want 0", n)
	}
	if len(au.events) != 1 {
		t.Errorf("Got(%d egress.denied audit events) for 20 made-up ids in one window; want 1 (the VM's limit)", len(au.events))
	}
}
