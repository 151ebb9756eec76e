package hypervisortest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/stockade-dev/stockade/hypervisor"
)

// SystemURI is the local system libvirtd the VM tests boot guests on.
const SystemURI = hypervisor.DefaultURI

// SystemUnavailable says why VMs cannot boot on the system libvirtd here,
// "" when they can: it takes root (qemu:///system relabels the guest files)
// and a libvirtd that answers.
func SystemUnavailable() string {
	if os.Geteuid() != 0 {
		return "VM tests need root (qemu:///system relabels the guest files)"
	}
	conn, err := libvirt.NewConnect(SystemURI)
	if err != nil {
		return fmt.Sprintf("libvirt at %s: %v (scripts/libvirtd.sh starts it)", SystemURI, err)
	}
	conn.Close()
	return ""
}

// NeedSystem stops the test unless VMs can boot on the system libvirtd:
// Unavailable (a failure under CI=true) without root or libvirtd.
func NeedSystem(tb testing.TB) {
	tb.Helper()
	if reason := SystemUnavailable(); reason != "" {
		Unavailable(tb, reason)
	}
}

// DestroyInstallation destroys every domain of the installation on the
// libvirtd at uri and returns their names; other installations' domains on
// a shared libvirtd are left alone. Their scratch disks in the shared test
// data dir go too: a test's installation never comes back to sweep them
// (each leaked 64 GiB sparse file held ~50 MB; a day of test runs left 19 GB).
func DestroyInstallation(ctx context.Context, uri, installationID string) ([]string, error) {
	h, err := hypervisor.Connect(ctx, hypervisor.Config{URI: uri, InstallationID: installationID})
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", uri, err)
	}
	defer h.Close()
	doms, err := h.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list domains: %w", err)
	}
	var names []string
	var errs []error
	for _, d := range doms {
		names = append(names, d.Name)
		if err := h.Destroy(ctx, d.ID); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
			errs = append(errs, fmt.Errorf("destroy %s: %w", d.Name, err))
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(filepath.Join(TestDataDir(), "scratch", installationID)); err != nil {
			errs = append(errs, fmt.Errorf("remove scratch disks: %w", err))
		}
	}
	return names, errors.Join(errs...)
}

// TestDataDir is where VM tests keep the guest image they share:
// STOCKADE_TEST_DATA_DIR, default /var/tmp/stockade-test-data.
func TestDataDir() string {
	if d := os.Getenv("STOCKADE_TEST_DATA_DIR"); d != "" {
		return d
	}
	return "/var/tmp/stockade-test-data"
}
