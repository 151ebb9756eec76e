package sandbox_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/policy"
)

// enospc is strerror(ENOSPC), errno 28, as the sandbox's dd prints it
// (EDQUOT, errno 122, prints "Disk quota exceeded").
const enospc = "No space left on device"

// TestDiskFullOnVMs fills a sandbox's /workspace and writable root layer far
// past its memory on a real VM: the writes fail at the policy's sizes with
// ENOSPC (errno 28, "No space left on device", as on a full disk of the
// sandbox's own; the ext4 project quotas of before said EDQUOT), and the
// sandbox (with the files it wrote before) and a neighbour in the same VM
// keep running. The VM's scratch disk is a sparse file in the data dir. On
// the tmpfs layers of before that, the fill was charged to the sandbox's
// memory and OOM-killed it.
func TestDiskFullOnVMs(t *testing.T) {
	e := need(t)
	actor := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "disk test"}
	ps, err := policy.NewStore(e.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	doc := policy.Defaults()
	doc.Resources.MaxMemoryMiB, doc.Resources.DefaultMemoryMiB = 256, 48
	doc.Resources.MaxDiskMiB, doc.Filesystem.WorkspaceMiB = 80, 120
	if _, err := ps.Save(ctx, actor, e.a.ID, policy.Edit{Doc: doc, Reason: "disk full test"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The shared environment's other tests expect the default policy.
		if _, err := ps.Save(ctx, actor, e.a.ID, policy.Edit{Doc: policy.Defaults(), Reason: "disk full test done"}); err != nil {
			t.Errorf("restore policy: %v", err)
		}
	})
	svc := sandbox.New(e.db, e.pools(), sandbox.Config{DataDir: e.dataDir, Logger: e.log, DefaultTemplate: "busybox", Policies: ps})
	defer svc.Close()

	sh := func(id, script string) (string, sandbox.ExecResult) {
		t.Helper()
		var out, errOut bytes.Buffer
		r, err := svc.Exec(ctx, actor, e.a.ID, id, sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}, TimeoutSeconds: 600}, &out, &errOut)
		if err != nil {
			t.Fatalf("Exec(%s, %q) = %v", id, script, err)
		}
		return out.String() + errOut.String(), r
	}
	filler, err := svc.Create(ctx, actor, e.a.ID, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create(filler) = %v", err)
	}
	defer svc.Destroy(ctx, actor, e.a.ID, filler.ID)
	neighbour, err := svc.Create(ctx, actor, e.a.ID, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Create(neighbour) = %v", err)
	}
	defer svc.Destroy(ctx, actor, e.a.ID, neighbour.ID)
	if filler.VMID != neighbour.VMID {
		t.Logf("the two sandboxes landed on different VMs (%s, %s)", filler.VMID, neighbour.VMID)
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "scratch", e.pools().InstallationID(), filler.VMID+".img")); err != nil {
		t.Errorf("Got(the VM's scratch disk) = %v; want a file in the data dir", err)
	}

	if out, r := sh(filler.ID, "echo kept > /workspace/keep.txt && echo kept > /home/sandbox/keep.txt && echo ok"); out != "ok\n" {
		t.Fatalf("Got(write before the fill) = %q, %+v; want ok", out, r)
	}
	tests := []struct {
		name, path string
		mib        int
	}{
		{"workspace", "/workspace/big", 120},
		{"writable root", "/tmp/big", 80},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, r := sh(filler.ID, "dd if=/dev/zero of="+tt.path+" bs=1M count=400 2>&1; ls -l "+tt.path+" | awk '{print \"size\", int($5/1048576)}'")
			if !strings.Contains(out, enospc) || strings.Contains(out, "quota") || r.Reason != "exited" {
				t.Errorf("Got(fill %s) = %q, %+v; want the write refused with ENOSPC (%q)", tt.path, out, r, enospc)
			}
			var size int
			for _, l := range strings.Split(out, "\n") {
				if n, ok := strings.CutPrefix(l, "size "); ok {
					size, _ = strconv.Atoi(strings.TrimSpace(n))
				}
			}
			if size < tt.mib*3/4 || size > tt.mib {
				t.Errorf("Got(size of %s when full) = %d MiB; want close to the policy's %d MiB", tt.path, size, tt.mib)
			}
		})
	}
	if out, r := sh(filler.ID, "cat /workspace/keep.txt /home/sandbox/keep.txt"); out != "kept\nkept\n" {
		t.Errorf("Got(the filler's files after the fill) = %q, %+v; want both kept", out, r)
	}
	if out, r := sh(neighbour.ID, "echo alive > /workspace/a && cat /workspace/a"); out != "alive\n" {
		t.Errorf("Got(the neighbour after the fill) = %q, %+v; want it running and writing", out, r)
	}
	st, err := svc.Get(ctx, e.a.ID, filler.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != sandbox.StateRunning || st.Stats == nil || st.Stats.OOMKills != 0 {
		t.Errorf("Got(filler status) = %s, %+v; want running, no OOM kill", st.State, st.Stats)
	}
}
