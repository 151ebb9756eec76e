package image

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Pre-started sandboxes (sandbox/agent/prestart.go) in the VM of
// TestSandboxes, whose sb-a is a claimed one: every check of that test runs
// on it too.

// startPool turns the agent's pool on (one busybox sandbox) and waits for
// its member.
func startPool(t *testing.T, ctx context.Context, c *agentproto.Client) {
	t.Helper()
	st, err := c.ConfigurePrestart(ctx, agentproto.PrestartConfig{PerTemplate: 1, Templates: []string{TemplateBusybox}})
	if err != nil || st.PerTemplate != 1 || len(st.Pools) != 1 || st.Pools[0].Template != TemplateBusybox {
		t.Fatalf("Got(ConfigurePrestart(1, busybox)) = %+v, %v; want one busybox pool", st, err)
	}
	waitPool(t, ctx, c, 1)
}

// waitPool waits until the busybox pool holds ready members and none is
// starting.
func waitPool(t *testing.T, ctx context.Context, c *agentproto.Client, ready int) agentproto.PrestartStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		st, err := c.ConfigurePrestart(ctx, agentproto.PrestartConfig{Query: true})
		if err != nil {
			t.Fatalf("ConfigurePrestart(query) = %v", err)
		}
		if p := st.Pool(TemplateBusybox); p.Ready == ready && p.Starting == 0 {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Got(pool) = %+v; want %d ready busybox sandboxes", st, ready)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func testPrestart(t *testing.T, ctx context.Context, c *agentproto.Client) {
	t.Run("refilled after a claim", func(t *testing.T) {
		st := waitPool(t, ctx, c, 1)
		if st.Claimed != 1 {
			t.Errorf("Got(pool claims) = %d; want 1 (sb-a)", st.Claimed)
		}
		gs, err := c.Stats(ctx)
		if err != nil || gs.Prestarted != 1 || gs.Sandboxes != 2 || gs.SandboxCgroups != 3 {
			t.Errorf("Got(Stats()) = %d pre-started, %d sandboxes, %d cgroups, %v; want 1, 2 and 3", gs.Prestarted, gs.Sandboxes, gs.SandboxCgroups, err)
		}
		list, err := c.ListSandboxes(ctx)
		if err != nil || len(list.Sandboxes) != 2 {
			t.Errorf("Got(ListSandboxes()) = %+v, %v; want sb-a and sb-b only: members are not listed", list.Sandboxes, err)
		}
	})

	t.Run("the next claim has nothing of the last", func(t *testing.T) {
		first, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-p1", Template: TemplateBusybox, Hostname: "first",
			Env: []string{"SECRET=one"}, Limits: agentproto.Limits{MemoryMiB: 64, PidsMax: 32, VCPUs: 0.5}})
		if err != nil || !first.Prestarted {
			t.Fatalf("Got(CreateSandbox(p1)) = %+v, %v; want it claimed", first, err)
		}
		out, _, _, err := run(ctx, c, sh("sb-p1", "echo $SECRET; hostname; cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/cpu.max; "+
			"echo one > /tmp/left; echo one > /workspace/left; echo one > $HOME/left; (sleep 8888 >/dev/null 2>&1 &); ls /workspace"))
		if want := "one\nfirst\n67108864\n32\n50000 100000\nleft\n"; err != nil || out != want {
			t.Errorf("Got(p1's env, hostname, limits, workspace) = %q, %v; want %q", out, err, want)
		}
		if _, err := c.DestroySandbox(ctx, "sb-p1"); err != nil {
			t.Fatal(err)
		}
		waitPool(t, ctx, c, 1)
		second, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-p2", Template: TemplateBusybox, Env: []string{"OTHER=two"}})
		if err != nil || !second.Prestarted {
			t.Fatalf("Got(CreateSandbox(p2)) = %+v, %v; want it claimed", second, err)
		}
		defer c.DestroySandbox(ctx, "sb-p2")
		out, _, _, err = run(ctx, c, sh("sb-p2", "env | grep -c SECRET; echo $OTHER; hostname; cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/cpu.max; "+
			"ls /tmp/left /workspace/left $HOME/left 2>/dev/null | wc -l; ls -A /workspace | wc -l; ps -o args | grep -c '^sleep 8888'"))
		if want := "0\ntwo\nsandbox\n268435456\n256\nmax 100000\n0\n0\n0\n"; err != nil || out != want {
			t.Errorf("Got(p2 after p1) = %q, %v; want %q: none of p1's env, hostname, limits, files or processes", out, err, want)
		}
	})

	t.Run("a spec with volumes is created fresh", func(t *testing.T) {
		_, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-v", Template: TemplateBusybox,
			Volumes: []agentproto.VolumeBind{{ID: "vol-0123456789abcdef", Path: "/data"}}})
		if !errors.Is(err, agentproto.ErrNotFound) || !strings.Contains(err.Error(), "not mounted") {
			t.Errorf("Got(CreateSandbox(with a volume not mounted)) = %v; want the fresh path's not found", err)
		}
		if st := waitPool(t, ctx, c, 1); st.Claimed != 3 {
			t.Errorf("Got(pool claims) = %d; want 3: the volume's create claimed none", st.Claimed)
		}
	})

	t.Run("the claim's lifetime", func(t *testing.T) {
		waitPool(t, ctx, c, 1)
		info, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-l", Template: TemplateBusybox, LifetimeSeconds: 2})
		if err != nil || !info.Prestarted {
			t.Fatalf("Got(CreateSandbox(lifetime 2 s)) = %+v, %v; want it claimed", info, err)
		}
		defer c.DestroySandbox(ctx, "sb-l")
		_, _, st, err := run(ctx, c, agentproto.ExecRequest{Sandbox: "sb-l", Argv: []string{"sleep", "60"}})
		if err != nil || st.Reason != agentproto.ReasonTimeout {
			t.Errorf("Got(exec past the claim's lifetime) = %+v, %v; want reason timeout", st, err)
		}
		if got, err := c.DestroySandbox(ctx, "sb-l"); err != nil || got.Reason != agentproto.ReasonTimeout {
			t.Errorf("Got(DestroySandbox(sb-l)) = %+v, %v; want it ended by its lifetime", got, err)
		}
	})

	t.Run("disabled", func(t *testing.T) {
		waitPool(t, ctx, c, 1) // none starting: turning it off stops every member at once
		st, err := c.ConfigurePrestart(ctx, agentproto.PrestartConfig{PerTemplate: 0})
		if err != nil || st.PerTemplate != 0 || len(st.Pools) != 0 {
			t.Fatalf("Got(ConfigurePrestart(0)) = %+v, %v; want no pool", st, err)
		}
		if gs, err := c.Stats(ctx); err != nil || gs.Prestarted != 0 {
			t.Errorf("Got(Stats().Prestarted) = %d, %v; want 0: members stopped", gs.Prestarted, err)
		}
		fresh, err := c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "sb-f", Template: TemplateBusybox})
		if err != nil || fresh.Prestarted {
			t.Errorf("Got(CreateSandbox() with the pool off) = %+v, %v; want a fresh sandbox", fresh, err)
		}
		c.DestroySandbox(ctx, "sb-f")
		for _, bad := range []agentproto.PrestartConfig{{PerTemplate: -1}, {PerTemplate: agentproto.MaxPrestartPerTemplate + 1}, {PerTemplate: 1, Templates: []string{"../x"}}} {
			if _, err := c.ConfigurePrestart(ctx, bad); !errors.Is(err, agentproto.ErrBadRequest) {
				t.Errorf("Got(ConfigurePrestart(%+v)) = %v; want ErrBadRequest", bad, err)
			}
		}
	})
}
