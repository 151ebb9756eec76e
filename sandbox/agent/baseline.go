package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// The baseline is what benchmarks compare sandboxes against in the same VM:
// crun used the plain way, timed inside the guest so no channel hop counts.

// baselineConfig is `crun spec`'s default container (root's shell with
// crun's default capabilities and mounts, no seccomp, no limits) on the
// template's root, read-only, running args.
func baselineConfig(rootfs, cgroupPath string, args []string) ociSpec {
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	return ociSpec{
		OCIVersion: "1.0.2",
		Process: &ociProcess{
			Args: args,
			Env:  []string{"PATH=" + defaultPath, "TERM=xterm"},
			Cwd:  "/",
			Capabilities: &ociCaps{Bounding: caps, Effective: caps, Inheritable: []string{}, Permitted: caps,
				Ambient: []string{}},
			Rlimits:         []ociRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: rootfs, Readonly: true},
		Hostname: "crun",
		Mounts: []ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
				Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		Linux: &ociLinux{
			Namespaces:  []ociNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}},
			CgroupsPath: cgroupPath,
			Resources:   &ociResources{Devices: []ociDeviceRule{{Allow: false, Access: "rwm"}}},
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

// Baseline times raw crun: see agentproto.BaselineRequest.
func (m *Manager) Baseline(ctx context.Context, req agentproto.BaselineRequest) (agentproto.BaselineResult, error) {
	if req.Kind == agentproto.BaselineLoop {
		return m.baselineLoop(ctx, req) // baseline_loop.go
	}
	if req.Count < 1 || req.Count > agentproto.MaxBaselineCount {
		return agentproto.BaselineResult{}, fmt.Errorf("baseline: count %d: %w", req.Count, agentproto.ErrBadRequest)
	}
	out := agentproto.BaselineResult{Samples: make([]time.Duration, 0, req.Count)}
	for range req.Count {
		var d time.Duration
		var err error
		switch req.Kind {
		case agentproto.BaselineRun:
			d, err = m.baselineRun(ctx, req.Template, req.NoASLR)
		case agentproto.BaselineExec:
			d, err = m.baselineExec(ctx, req.Sandbox, req.NoASLR)
		case agentproto.BaselineSpawn:
			d, err = m.baselineSpawn(ctx, req.Template)
		default:
			err = fmt.Errorf("baseline kind %q: %w", req.Kind, agentproto.ErrBadRequest)
		}
		if err != nil {
			return agentproto.BaselineResult{}, fmt.Errorf("baseline: %w", err)
		}
		out.Samples = append(out.Samples, d)
	}
	return out, nil
}

// baselineRun times `crun run` of the template, spawn to first output line.
func (m *Manager) baselineRun(ctx context.Context, name string, noASLR bool) (time.Duration, error) {
	tpl, err := m.template(ctx, name, false)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	m.baselines++
	id := fmt.Sprintf("baseline-%d", m.baselines)
	m.mu.Unlock()
	dir := filepath.Join(m.cfg.StateDir, "baseline", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	cg := "/" + cgroupParent + "/" + id
	defer killCgroup(context.Background(), filepath.Join(m.cfg.CgroupDir, cg))
	b, err := json.Marshal(baselineConfig(tpl.dir, cg, []string{"/bin/echo", "ready"}))
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return 0, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer pr.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		pw.Close()
		return 0, err
	}
	defer devnull.Close()
	start := time.Now()
	p, done, err := m.startMaybeASLR(noASLR, []string{"crun", "--root", filepath.Join(dir, "state"), "run",
		"--bundle", dir, id}, &os.ProcAttr{Dir: dir, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: []*os.File{devnull, pw, pw}})
	pw.Close()
	if err != nil {
		return 0, fmt.Errorf("crun run: %w", err)
	}
	defer p.Release()
	stop := context.AfterFunc(ctx, func() { p.Kill() })
	defer stop()
	line, rerr := bufio.NewReader(pr).ReadString('\n')
	first := time.Since(start)
	ws := <-done
	if rerr != nil || line != "ready\n" || !ws.Exited() || ws.ExitStatus() != 0 {
		return 0, fmt.Errorf("crun run: exit %d, first line %q (%v)", ws.ExitStatus(), line, rerr)
	}
	return first, nil
}

// baselineExec times `crun exec <sandbox> /bin/true`, spawn to exit.
func (m *Manager) baselineExec(ctx context.Context, id string, noASLR bool) (time.Duration, error) {
	sb, err := m.get(id)
	if err != nil {
		return 0, err
	}
	if err := sb.begin(); err != nil {
		return 0, err
	}
	defer sb.end()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	start := time.Now()
	p, done, err := m.startMaybeASLR(noASLR, []string{"crun", "--root", filepath.Join(sb.dir, "crun"), "exec", sb.crunID, "/bin/true"},
		&os.ProcAttr{Dir: sb.dir, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Files: []*os.File{devnull, devnull, devnull}})
	if err != nil {
		return 0, fmt.Errorf("crun exec: %w", err)
	}
	defer p.Release()
	stop := context.AfterFunc(ctx, func() { p.Kill() })
	defer stop()
	var ws unix.WaitStatus = <-done
	d := time.Since(start)
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return 0, fmt.Errorf("crun exec: exit %d signal %v", ws.ExitStatus(), ws.Signal())
	}
	return d, nil
}

// startMaybeASLR starts crun, without address randomization if noASLR.
func (m *Manager) startMaybeASLR(noASLR bool, argv []string, attr *os.ProcAttr) (*os.Process, <-chan unix.WaitStatus, error) {
	if !noASLR {
		return m.cfg.Start(m.cfg.CrunPath, argv, attr)
	}
	type started struct {
		p    *os.Process
		done <-chan unix.WaitStatus
	}
	st, err := startWithoutASLR(func() (started, error) {
		p, done, err := m.cfg.Start(m.cfg.CrunPath, argv, attr)
		return started{p, done}, err
	})
	return st.p, st.done, err
}
