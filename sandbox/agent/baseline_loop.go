package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// baselineLoop runs agentproto.BaselineLoop: the sustained benchmark's
// agent task done with raw crun, Concurrency at a time for Duration.
func (m *Manager) baselineLoop(ctx context.Context, req agentproto.BaselineRequest) (agentproto.BaselineResult, error) {
	if err := req.CheckLoop(); err != nil {
		return agentproto.BaselineResult{}, err
	}
	tpl, err := m.template(ctx, req.Template, false)
	if err != nil {
		return agentproto.BaselineResult{}, fmt.Errorf("baseline loop: %w", err)
	}
	res, err := agentproto.RunLoop(ctx, req.Concurrency, req.Duration, func(ctx context.Context, _, _ int) error {
		return m.baselineTask(ctx, tpl.dir, req.NoASLR)
	})
	if err != nil {
		return agentproto.BaselineResult{}, fmt.Errorf("baseline loop: %w", err)
	}
	return agentproto.BaselineResult{Loop: &res}, nil
}

// baselineTask is one task: `crun run --detach` of the template (crun's
// default spec, read-only root) with the bundle's workspace directory bound
// at /workspace, a file written there, `crun exec` of cat reading it back
// through a pipe, `crun delete --force`.
func (m *Manager) baselineTask(ctx context.Context, rootfs string, noASLR bool) error {
	m.mu.Lock()
	m.baselines++
	n := m.baselines
	m.mu.Unlock()
	id := fmt.Sprintf("baseline-%d", n)
	dir := filepath.Join(m.cfg.StateDir, "baseline", id)
	ws := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cg := "/" + cgroupParent + "/" + id
	defer killCgroup(context.Background(), filepath.Join(m.cfg.CgroupDir, cg))
	spec := baselineConfig(rootfs, cg, []string{"/bin/sleep", "100000"})
	spec.Mounts = append(spec.Mounts, ociMount{Destination: "/workspace", Type: "bind", Source: ws, Options: []string{"rbind", "rw"}})
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return err
	}
	state := filepath.Join(dir, "state")
	if _, err := m.crun(ctx, noASLR, dir, state, false, "run", "--detach", "--bundle", dir, id); err != nil {
		return err
	}
	deleted := false
	defer func() {
		if !deleted {
			m.crun(context.Background(), noASLR, dir, state, false, "delete", "--force", id)
		}
	}()
	want := fmt.Sprintf("task %d\n", n)
	if err := os.WriteFile(filepath.Join(ws, "task.txt"), []byte(want), 0o644); err != nil {
		return err
	}
	out, err := m.crun(ctx, noASLR, dir, state, true, "exec", id, "/bin/cat", "/workspace/task.txt")
	if err != nil {
		return err
	}
	if string(out) != want {
		return fmt.Errorf("crun exec cat: output %q, want %q", out, want)
	}
	deleted = true
	_, err = m.crun(ctx, noASLR, dir, state, false, "delete", "--force", id)
	return err
}

// crun runs `crun --root state <args>` in dir and returns its standard
// output (up to 64 KiB) when capture (not for `run --detach`: the
// container would hold the pipe open); a non-zero exit is an error.
func (m *Manager) crun(ctx context.Context, noASLR bool, dir, state string, capture bool, args ...string) ([]byte, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	pr, pw := devnull, devnull
	if capture {
		if pr, pw, err = os.Pipe(); err != nil {
			return nil, err
		}
		defer pr.Close()
	}
	p, done, err := m.startMaybeASLR(noASLR, append([]string{"crun", "--root", state}, args...), &os.ProcAttr{Dir: dir,
		Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Files: []*os.File{devnull, pw, devnull}})
	if capture {
		pw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("crun %s: %w", args[0], err)
	}
	defer p.Release()
	stop := context.AfterFunc(ctx, func() { p.Kill() })
	defer stop()
	var out bytes.Buffer
	var rerr error
	if capture {
		_, rerr = io.Copy(&out, io.LimitReader(pr, 64<<10))
	}
	ws := <-done
	if rerr != nil || !ws.Exited() || ws.ExitStatus() != 0 {
		return nil, fmt.Errorf("crun %s: exit %d signal %v (%v)", args[0], ws.ExitStatus(), ws.Signal(), rerr)
	}
	return out.Bytes(), nil
}
