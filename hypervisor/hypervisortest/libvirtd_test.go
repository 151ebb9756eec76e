package hypervisortest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
)

var second hypervisortest.Second

func TestMain(m *testing.M) {
	code := m.Run()
	if err := second.Stop(); err != nil {
		println("stop the second libvirtd:", err.Error())
	}
	os.Exit(code)
}

// TestSecondLibvirtd: the second host answers on qemu+tcp, is not the
// system libvirtd (its domains are its own), and a private one that is
// killed stops answering and answers again once restarted.
func TestSecondLibvirtd(t *testing.T) {
	uri := second.URI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := hypervisortest.Connect(t, hypervisor.Config{URI: uri})
	if got := h.URI(); got != uri {
		t.Errorf("Got(URI) = %q; want %q", got, uri)
	}
	if c, err := h.Capacity(ctx); err != nil || c.CPUs == 0 || c.MemoryTotalKiB == 0 {
		t.Errorf("Got(Capacity) = %+v, %v; want CPUs and memory", c, err)
	}

	l := hypervisortest.StartLibvirtd(t)
	if l.URI == uri {
		t.Fatalf("Got(private URI) = %q; want a libvirtd other than the shared second one", l.URI)
	}
	probe := func() error {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		h, err := hypervisor.Connect(ctx, hypervisor.Config{URI: l.URI, InstallationID: hypervisortest.NewID("test-")})
		if err == nil {
			h.Close()
		}
		return err
	}
	if err := probe(); err != nil {
		t.Fatalf("Connect(%s) = %v", l.URI, err)
	}
	l.Kill(t)
	if err := probe(); err == nil {
		t.Errorf("Connect(%s) after Kill = nil; want an error", l.URI)
	}
	l.Restart(t)
	if err := probe(); err != nil {
		t.Errorf("Connect(%s) after Restart = %v; want nil", l.URI, err)
	}
}
