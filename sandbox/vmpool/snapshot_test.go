package vmpool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// lockedBuffer collects log lines from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// snapEnv is a service with snapshots on, for one tenant.
type snapEnv struct {
	svc  *vmpool.Service
	tn   tenants.Tenant
	logs *lockedBuffer
}

func newSnapEnv(t *testing.T) *snapEnv {
	t.Helper()
	dataDir, _ := needVMs(t)
	db := freshDB(t)
	tn, err := tenants.NewStore(db, nil).CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "snap", "")
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(&tee{logs, tbWriter{t}}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc := startService(t, db, vmpool.Config{URIs: []string{systemURI}, DataDir: dataDir, Logger: log,
		ConnectTimeout: 30 * time.Second, Snapshots: true, AgentReady: prestartOne(t)})
	cleanupInstallation(t, svc.InstallationID())
	return &snapEnv{svc: svc, tn: tn, logs: logs}
}

type tee struct {
	a *lockedBuffer
	b tbWriter
}

func (w *tee) Write(p []byte) (int, error) {
	w.a.Write(p)
	return w.b.Write(p)
}

// prestartOne is the AgentReady hook of the sandbox service with its
// defaults (sandbox.PrestartHook): one pre-started sandbox of busybox in
// every VM, the snapshot VM's included.
func prestartOne(tb testing.TB) func(ctx context.Context, vm vmpool.VM, c *agentproto.Client) {
	return func(ctx context.Context, vm vmpool.VM, c *agentproto.Client) {
		if _, err := c.ConfigurePrestart(ctx, agentproto.PrestartConfig{PerTemplate: 1, Templates: []string{"busybox"}}); err != nil {
			tb.Logf("prestart in %s: %v", vm.ID, err)
		}
	}
}

// start creates VMs at once and waits until they all run.
func (e *snapEnv) start(t *testing.T, n int) []vmpool.VM {
	t.Helper()
	var out []vmpool.VM
	for range n {
		vm, err := e.svc.Create(ctx, vmpool.SystemActor(), e.tn.ID)
		if err != nil {
			t.Fatalf("Create = %v", err)
		}
		out = append(out, vm)
	}
	for i, vm := range out {
		waitFor(t, 10*time.Minute, "vm "+vm.ID+" running", func() bool {
			got, err := e.svc.Store().VM(ctx, e.tn.ID, vm.ID)
			if err != nil {
				t.Fatalf("VM(%s) = %v", vm.ID, err)
			}
			if !got.State.Active() {
				t.Fatalf("VM %s ended %s (%s)", vm.ID, got.State, got.StateReason)
			}
			out[i] = got
			return got.State == vmpool.StateRunning
		})
	}
	return out
}

func (e *snapEnv) destroy(t *testing.T, vms ...vmpool.VM) {
	t.Helper()
	for _, vm := range vms {
		if _, err := e.svc.Destroy(ctx, vmpool.SystemActor(), e.tn.ID, vm.ID); err != nil {
			t.Fatalf("Destroy(%s) = %v", vm.ID, err)
		}
	}
}

// waitBuilds waits until n snapshots were built.
func (e *snapEnv) waitBuilds(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, 10*time.Minute, fmt.Sprintf("%d snapshot builds", n), func() bool { return e.svc.SnapshotCounts().Builds >= n })
}

// runIn runs a command in a fresh sandbox of vm that writes and reads its
// workspace (on the VM's own scratch disk).
func (e *snapEnv) runIn(t *testing.T, vm vmpool.VM) {
	t.Helper()
	c, err := e.svc.Agent(ctx, e.tn.ID, vm.ID)
	if err != nil {
		t.Fatalf("Agent(%s) = %v", vm.ID, err)
	}
	sb := "sb-" + vm.ID[len(vm.ID)-8:]
	if _, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: sb, Template: "busybox"}); err != nil {
		t.Fatalf("CreateSandbox in %s = %v", vm.ID, err)
	}
	var out, errOut bytes.Buffer
	st, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: sb, Argv: []string{"sh", "-c", "echo " + vm.ID + " > /workspace/f && cat /workspace/f"}},
		nil, &out, &errOut)
	if err != nil || st.Code != 0 {
		t.Fatalf("Exec in %s = %+v, %v (stderr %q); want exit 0", vm.ID, st, err, errOut.String())
	}
	if got := strings.TrimSpace(out.String()); got != vm.ID {
		t.Errorf("Got(output in %s) = %q; want %q", vm.ID, got, vm.ID)
	}
	// On the VM's scratch disk (XFS), as after a cold boot, not a tmpfs.
	out.Reset()
	st, err = c.Exec(ctx, agentproto.ExecRequest{Sandbox: sb, Argv: []string{"awk", `$2 == "/workspace" { print $3 }`, "/proc/mounts"}},
		nil, &out, &errOut)
	if err != nil || st.Code != 0 {
		t.Fatalf("Exec in %s = %+v, %v (stderr %q); want exit 0", vm.ID, st, err, errOut.String())
	}
	if got := strings.TrimSpace(out.String()); got != "xfs" {
		t.Errorf("Got(/workspace file system in %s) = %q; want xfs (the scratch disk)", vm.ID, got)
	}
}

// snapshotFiles is the one snapshot slot of the service's local host.
func (e *snapEnv) snapshotFiles(t *testing.T) (snap, meta string) {
	t.Helper()
	dataDir, _ := needVMs(t)
	m, _ := filepath.Glob(filepath.Join(dataDir, "hosts", e.svc.InstallationID(), "snapshot-*.json"))
	if len(m) != 1 {
		t.Fatalf("snapshot sidecars = %v; want one", m)
	}
	return strings.TrimSuffix(m[0], ".json") + ".snap", m[0]
}

// TestSnapshotBoot: the first VM cold boots and a snapshot is built behind
// it; the next two restore from it at once, with their own domain UUIDs,
// both running sandboxes on their own scratch disks; a corrupt and then a
// stale snapshot fall back to cold boots, the reason recorded on the VM and
// logged, and the snapshot is rebuilt each time.
func TestSnapshotBoot(t *testing.T) {
	e := newSnapEnv(t)

	first := e.start(t, 1)
	if got := first[0].BootKind; got != "cold: none" {
		t.Errorf("Got(first vm boot kind) = %q; want %q", got, "cold: none")
	}
	e.destroy(t, first...)
	e.waitBuilds(t, 1)

	two := e.start(t, 2)
	for _, vm := range two {
		if vm.BootKind != vmpool.BootRestored {
			t.Fatalf("Got(vm %s boot kind) = %q; want %q", vm.ID, vm.BootKind, vmpool.BootRestored)
		}
	}
	if two[0].DomainUUID == two[1].DomainUUID || two[0].DomainUUID == "" {
		t.Errorf("Got(restored domain UUIDs) = %q, %q; want two distinct", two[0].DomainUUID, two[1].DomainUUID)
	}
	t.Run("OwnIdentities", func(t *testing.T) { e.checkRestored(t, two) }) // identity_vm_test.go
	for _, vm := range two {
		e.runIn(t, vm)
	}
	e.destroy(t, two...)
	if got := e.svc.SnapshotCounts().Restores; got != 2 {
		t.Errorf("Got(restores) = %d; want 2", got)
	}

	// Corrupt: a flipped byte in the memory stream (same size).
	snap, meta := e.snapshotFiles(t)
	f, err := os.OpenFile(snap, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	b := []byte{0}
	f.ReadAt(b, st.Size()/2)
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	corrupt := e.start(t, 1)
	if got := corrupt[0].BootKind; !strings.HasPrefix(got, "cold: corrupt: ") {
		t.Errorf("Got(boot kind from a corrupt snapshot) = %q; want cold: corrupt: ...", got)
	}
	if !strings.Contains(e.logs.String(), "reason=corrupt") {
		t.Errorf("log has no restore failure with reason=corrupt")
	}
	e.destroy(t, corrupt...)
	e.waitBuilds(t, 2)

	// Stale: the sidecar says it was built from another image.
	var m map[string]any
	raw, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["key"] = "built-from-an-older-image"
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(meta, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	stale := e.start(t, 1)
	if got := stale[0].BootKind; got != "cold: stale" {
		t.Errorf("Got(boot kind from a stale snapshot) = %q; want %q", got, "cold: stale")
	}
	if !strings.Contains(e.logs.String(), "vm snapshot stale") {
		t.Errorf("log has no stale snapshot line")
	}
	e.destroy(t, stale...)
	e.waitBuilds(t, 3)
	fb := e.svc.SnapshotCounts().Fallback
	if fb[vmpool.FallbackNone] != 1 || fb[vmpool.FallbackCorrupt] != 1 || fb[vmpool.FallbackStale] != 1 {
		t.Errorf("Got(fallbacks) = %v; want none, corrupt and stale once each", fb)
	}
}
