// Package hypervisortest holds what tests need around the libvirt driver: a
// conformance suite any Host implementation must pass, helpers to connect to
// real libvirt (or skip), and a minimal busybox guest that boots for real.
package hypervisortest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/stockade-dev/stockade/hypervisor"
)

// Unavailable stops a test whose dependency is missing: a failure under
// CI=true (CI must have everything), a skip with the reason elsewhere.
func Unavailable(tb testing.TB, reason string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("CI=true and %s", reason)
	}
	tb.Skipf("skipping: %s", reason)
}

// NewID returns a fresh VM or installation id with the given prefix.
func NewID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Connect opens a Host on uri for a fresh installation id. At cleanup it
// destroys every domain of that installation still there (so a failed test
// leaks nothing) and closes the Host. A libvirt that cannot be reached is
// Unavailable.
func Connect(tb testing.TB, cfg hypervisor.Config) *hypervisor.Host {
	tb.Helper()
	if cfg.InstallationID == "" {
		cfg.InstallationID = NewID("test-")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := hypervisor.Connect(ctx, cfg)
	if errors.Is(err, hypervisor.ErrUnavailable) {
		Unavailable(tb, fmt.Sprintf("libvirt at %s: %v", cfg.URI, err))
	}
	if err != nil {
		tb.Fatalf("hypervisor.Connect(%s) error = %v", cfg.URI, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if doms, err := h.List(ctx); err == nil {
			for _, d := range doms {
				if err := h.Destroy(ctx, d.ID); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
					tb.Errorf("cleanup: Destroy(%s) error = %v", d.ID, err)
				}
			}
		}
		h.Close()
	})
	return h
}

// DefineRaw defines (does not start) a persistent domain from raw XML,
// bypassing the driver: the way another tool, or another installation, puts
// domains on a shared libvirtd. It is undefined at cleanup.
func DefineRaw(tb testing.TB, uri, xml string) {
	tb.Helper()
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		Unavailable(tb, fmt.Sprintf("libvirt at %s: %v", uri, err))
	}
	dom, err := conn.DomainDefineXML(xml)
	if err != nil {
		conn.Close()
		tb.Fatalf("define raw domain on %s: %v", uri, err)
	}
	tb.Cleanup(func() {
		if active, _ := dom.IsActive(); active {
			_ = dom.Destroy()
		}
		if err := dom.Undefine(); err != nil {
			tb.Errorf("cleanup: undefine raw domain: %v", err)
		}
		dom.Free()
		conn.Close()
	})
}

// RawInfo reads a domain's state by name straight from libvirt: for checking
// that the driver left someone else's domain alone. ok is false if it is gone.
func RawInfo(tb testing.TB, uri, name string) (state libvirt.DomainState, ok bool) {
	tb.Helper()
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		tb.Fatalf("connect %s: %v", uri, err)
	}
	defer conn.Close()
	dom, err := conn.LookupDomainByName(name)
	if err != nil {
		return 0, false
	}
	defer dom.Free()
	st, _, err := dom.GetState()
	if err != nil {
		return 0, false
	}
	return st, true
}

// VMDir is a temporary directory QEMU can reach: QEMU runs as its own user,
// and t.TempDir's parent is private to root. Removed at cleanup.
func VMDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "stockade-vm-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
