package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// ManagerConfig configures a Manager. Zero fields take the defaults named.
type ManagerConfig struct {
	Logger *slog.Logger
	// StateDir holds the bundles (StateDir/sandboxes/<id>) and the template
	// mounts (StateDir/templates/<name>); default /run/stockade.
	StateDir string
	// CgroupDir is the cgroup2 mount; default /sys/fs/cgroup.
	CgroupDir string
	// CrunPath defaults to /usr/bin/crun.
	CrunPath string
	// InitPath is the agent binary bound into every sandbox as its init;
	// default this executable.
	InitPath string
	// StubPath is the stub init of idle sandboxes (hypervisor/image/stubinit);
	// default InitPath + "-stub" when that file exists (the guest image
	// ships /init-stub), else none: sandboxes then keep the Go init.
	StubPath string
	// InitIdle is how long a sandbox idles before its init hands PID 1 to
	// the stub, when the spec says nothing (InitIdleMillis 0); default 3 s.
	InitIdle time.Duration
	// SysBlockDir and DevDir are where template disks are looked for:
	// /sys/block and /dev.
	SysBlockDir, DevDir string
	// MaxSandboxes bounds the sandboxes of the guest; default
	// agentproto.SandboxCapacity of the guest's MemTotal (capacity.go).
	MaxSandboxes int
	// MaxFileBytes bounds one file.read or file.write; default 256 MiB.
	MaxFileBytes int64
	// DisksReady is closed once the modules for template disks (virtio_blk,
	// ext4, overlay) are loaded; nil means they are.
	DisksReady <-chan struct{}

	// Start starts a process whose exit status arrives on the channel: PID
	// 1 passes its reaper's; nil means os.StartProcess.
	Start func(path string, argv []string, attr *os.ProcAttr) (*os.Process, <-chan unix.WaitStatus, error)
}

// Manager runs the sandboxes of one guest: crun containers whose init is
// this binary (sandbox-init), reached over a socket in their bundle.
type Manager struct {
	cfg       ManagerConfig
	log       *slog.Logger
	cgroups   string // the parent of every sandbox's cgroup
	templates *templates
	scratch   *scratch

	// scanned is closed after the first template scan; scannedAt is when.
	scanned   chan struct{}
	scannedAt time.Time

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	baselines int

	link hostLink // egress.go

	execs execTable // detach.go

	poolOnce sync.Once
	pool     *prestartPool // prestart.go
}

// NewManager checks cfg, fills its defaults and sets up the cgroups.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = "/run/stockade"
	}
	if cfg.CgroupDir == "" {
		cfg.CgroupDir = "/sys/fs/cgroup"
	}
	if cfg.CrunPath == "" {
		cfg.CrunPath = "/usr/bin/crun"
	}
	if cfg.InitPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("new sandbox manager: %w", err)
		}
		cfg.InitPath = exe
	}
	if cfg.StubPath == "" {
		if fi, err := os.Stat(cfg.InitPath + "-stub"); err == nil && fi.Mode().IsRegular() {
			cfg.StubPath = cfg.InitPath + "-stub"
		}
	}
	if cfg.InitIdle == 0 {
		cfg.InitIdle = defaultInitIdle
	}
	if cfg.SysBlockDir == "" {
		cfg.SysBlockDir = "/sys/block"
	}
	if cfg.DevDir == "" {
		cfg.DevDir = "/dev"
	}
	if cfg.MaxSandboxes <= 0 {
		n, err := guestCapacity("/proc/meminfo")
		if err != nil {
			return nil, fmt.Errorf("new sandbox manager: %w", err)
		}
		cfg.MaxSandboxes = n
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 256 << 20
	}
	if cfg.Start == nil {
		cfg.Start = startProcess
	}
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "sandboxes"), filepath.Join(cfg.StateDir, "templates")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("new sandbox manager: %w", err)
		}
	}
	// Templates are mounted under a folder the sandbox user can traverse:
	// overlay checks the lower layer with the mounter's rights, crun's
	// baseline run uses it as a root directly.
	os.Chmod(filepath.Join(cfg.StateDir, "templates"), 0o755)
	cg, err := setupCgroups(cfg.CgroupDir)
	if err != nil {
		return nil, fmt.Errorf("new sandbox manager: %w", err)
	}
	m := &Manager{
		cfg: cfg, log: cfg.Logger, cgroups: cg, sandboxes: map[string]*sandbox{}, scanned: make(chan struct{}),
		templates: newTemplates(cfg.Logger, cfg.SysBlockDir, cfg.DevDir, filepath.Join(cfg.StateDir, "templates")),
		scratch:   newScratch(cfg.SysBlockDir, cfg.DevDir, filepath.Join(cfg.StateDir, "scratch")),
	}
	// Mount the templates as soon as their disks can be read, so the first
	// create does not wait for it.
	go func() {
		defer close(m.scanned)
		m.disksReady(context.Background())
		if err := m.templates.scan(); err != nil {
			m.log.Warn("templates", "err", err)
		}
		if _, err := m.scratch.find(); err != nil {
			m.log.Warn("scratch disk", "err", err)
		}
		m.scannedAt = time.Now()
	}()
	return m, nil
}

// startProcess is ManagerConfig.start outside PID 1.
func startProcess(path string, argv []string, attr *os.ProcAttr) (*os.Process, <-chan unix.WaitStatus, error) {
	p, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return nil, nil, err
	}
	done := make(chan unix.WaitStatus, 1)
	go func() {
		ws := unix.WaitStatus(0xff00) // "exit 255" when the status is unknown
		if st, err := p.Wait(); err == nil {
			if s, ok := st.Sys().(syscall.WaitStatus); ok {
				ws = unix.WaitStatus(s)
			}
		}
		done <- ws
	}()
	return p, done, nil
}

func (m *Manager) disksReady(ctx context.Context) error {
	if m.cfg.DisksReady == nil {
		return nil
	}
	select {
	case <-m.cfg.DisksReady:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for template disks: %w", ctx.Err())
	}
}

// template finds the template called name, mounting newly seen disks. Disks
// appear shortly after their driver loads: a missing one is looked for
// until a few seconds after the first scan.
func (m *Manager) template(ctx context.Context, name string, hotplugged bool) (template, error) {
	select {
	case <-m.scanned:
	case <-ctx.Done():
		return template{}, fmt.Errorf("wait for template disks: %w", ctx.Err())
	}
	deadline := m.scannedAt.Add(3 * time.Second)
	if hotplugged {
		// Hot-plugged just before this create (a tenant template): the
		// guest may take a while to probe it under TCG.
		if later := time.Now().Add(20 * time.Second); later.After(deadline) {
			deadline = later
		}
	}
	for {
		if tpl, ok := m.templates.get(name); ok {
			return tpl, nil
		}
		if err := m.templates.scan(); err != nil {
			m.log.Warn("templates", "err", err)
		}
		if tpl, ok := m.templates.get(name); ok {
			return tpl, nil
		}
		if time.Now().After(deadline) {
			return template{}, fmt.Errorf("template %q: %w", name, agentproto.ErrNotFound)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return template{}, ctx.Err()
		}
	}
}

// sandbox is one sandbox and what it holds in the guest.
type sandbox struct {
	// id is the host's id; a pool member's own until it is claimed
	// (prestart.go), crunID the container's and dir's, cgroup's name.
	id      string
	crunID  string
	spec    agentproto.SandboxSpec // Limits with defaults
	dir     string                 // bundle
	rootfs  string                 // the overlay: the sandbox's / as the agent sees it
	cgroup  string
	created time.Time
	tpl     template
	// scratchDir holds its folders on the scratch disk, quota projects
	// projects; empty when they are tmpfs (scratch.go).
	scratchDir string
	projects   []uint32

	mu         sync.Mutex
	state      string
	reason     string
	startup    agentproto.Startup
	lastActive time.Time
	active     int
	initPID    int // in the guest's PID namespace
	watch      *net.UnixConn
	initGone   chan struct{} // closed when watch ends: the init died
	// prestarted: claimed from the pool; claimEnv is the claim's env,
	// added to every command's (prestart.go).
	prestarted bool
	claimEnv   []string
	final      *agentproto.SandboxStats // sampled when it stopped
	pause      pauseState               // pause.go
	inits      initPool                 // idle connections to its init (initpool.go)

	stopOnce sync.Once
	stopping chan struct{} // closed when stop begins
	stopped  chan struct{} // closed when its processes and mounts are gone
	// relife carries a new remaining lifetime to supervise (lifetime.go).
	relife chan time.Duration
}

func (sb *sandbox) info() agentproto.SandboxInfo {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.infoLocked()
}

func (sb *sandbox) infoLocked() agentproto.SandboxInfo {
	info := agentproto.SandboxInfo{
		ID: sb.id, Template: sb.spec.Template, State: sb.state, Reason: sb.reason, Paused: sb.pause.paused,
		Limits: sb.spec.Limits, Created: sb.created, Startup: sb.startup, Final: sb.final, Prestarted: sb.prestarted,
	}
	if sb.final != nil {
		// SampledAtGuest still holds its monotonic reading here.
		info.StoppedAgo = max(time.Since(sb.final.SampledAtGuest), 0)
	}
	return info
}

func (sb *sandbox) ctlPath() string { return filepath.Join(sb.dir, "ctl.sock") }

// begin marks an operation (exec, file) in the sandbox; end must follow.
// It fails unless the sandbox runs.
func (sb *sandbox) begin() error {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.state != agentproto.SandboxRunning {
		return fmt.Errorf("sandbox %s is %s: %w", sb.id, sb.state, agentproto.ErrConflict)
	}
	if sb.pause.paused {
		return fmt.Errorf("sandbox %s is paused; resume it: %w", sb.id, agentproto.ErrConflict)
	}
	sb.active++
	sb.lastActive = time.Now()
	return nil
}

// currentState is the sandbox's state now.
func (sb *sandbox) currentState() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.state
}

func (sb *sandbox) end() {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.active--
	sb.lastActive = time.Now()
}

func (sb *sandbox) idleFor(now time.Time) time.Duration {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.active > 0 || sb.pause.paused {
		return 0
	}
	return now.Sub(sb.lastActive)
}

func (sb *sandbox) stopReason() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.reason
}

var validHostname = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

func checkSpec(spec agentproto.SandboxSpec) error {
	if err := agentproto.CheckSandboxID(spec.ID); err != nil {
		return err
	}
	if !validTemplateName.MatchString(spec.Template) {
		return fmt.Errorf("template name %q: %w", spec.Template, agentproto.ErrBadRequest)
	}
	if spec.InitIdleMillis > 24*3600*1000 {
		return fmt.Errorf("init_idle_ms %d: at most a day: %w", spec.InitIdleMillis, agentproto.ErrBadRequest)
	}
	if spec.Hostname != "" && !validHostname.MatchString(spec.Hostname) {
		return fmt.Errorf("hostname %q: %w", spec.Hostname, agentproto.ErrBadRequest)
	}
	if spec.LifetimeSeconds < 0 || spec.IdleSeconds < 0 {
		return fmt.Errorf("negative lifetime or idle timeout: %w", agentproto.ErrBadRequest)
	}
	if err := checkEnv(spec.Env); err != nil {
		return err
	}
	return checkLimits(spec.Limits)
}

// maxEnvBytes bounds a sandbox's or a command's environment and argv.
const maxEnvBytes = 128 << 10

func checkEnv(env []string) error {
	size := 0
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("environment entry %q: want KEY=VALUE: %w", kv, agentproto.ErrBadRequest)
		}
		size += len(kv) + 1
	}
	if size > maxEnvBytes {
		return fmt.Errorf("environment of %d bytes: %w", size, agentproto.ErrBadRequest)
	}
	return nil
}

// sandboxEnv is the environment every command of a sandbox starts from.
func sandboxEnv(extra []string) []string {
	return mergeEnv([]string{
		"PATH=" + defaultPath,
		"HOME=/home/sandbox",
		"USER=sandbox",
		"LOGNAME=sandbox",
		"SHELL=/bin/sh",
		"LANG=C.UTF-8",
	}, extra)
}

// Create makes and starts a sandbox; it returns once the sandbox's init
// answers. On failure nothing of it is left.
func (m *Manager) Create(ctx context.Context, spec agentproto.SandboxSpec) (agentproto.SandboxInfo, error) {
	spec.Limits = withDefaults(spec.Limits)
	if err := checkSpec(spec); err != nil {
		return agentproto.SandboxInfo{}, fmt.Errorf("create sandbox: %w", err)
	}
	if info, ok := m.claim(ctx, spec); ok {
		m.poolTemplate(spec)
		return info, nil
	}
	m.evictForRoom()
	start := time.Now()
	sb := m.newSandbox(spec, start)
	m.mu.Lock()
	if _, ok := m.sandboxes[spec.ID]; ok {
		m.mu.Unlock()
		return agentproto.SandboxInfo{}, fmt.Errorf("create sandbox %s: exists: %w", spec.ID, agentproto.ErrConflict)
	}
	if len(m.sandboxes) >= m.cfg.MaxSandboxes {
		m.mu.Unlock()
		return agentproto.SandboxInfo{}, fmt.Errorf("create sandbox %s: %d sandboxes in this guest: %w",
			spec.ID, m.cfg.MaxSandboxes, agentproto.ErrExhausted)
	}
	m.sandboxes[spec.ID] = sb
	m.mu.Unlock()

	if err := m.start(ctx, sb, start); err != nil {
		// Nothing of a failed sandbox stays: not even its record.
		m.discard(sb)
		m.mu.Lock()
		delete(m.sandboxes, spec.ID)
		m.mu.Unlock()
		return agentproto.SandboxInfo{}, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	go m.supervise(sb)
	m.poolTemplate(spec)
	info := sb.info()
	m.log.Info("sandbox created", "sandbox", sb.id, "template", spec.Template,
		"mounts", info.Startup.Mounts, "crun", info.Startup.Crun, "ready", info.Startup.Ready)
	return info, nil
}

// newSandbox is the record of a sandbox about to start, named spec.ID in
// the guest.
func (m *Manager) newSandbox(spec agentproto.SandboxSpec, start time.Time) *sandbox {
	sb := &sandbox{
		id: spec.ID, crunID: spec.ID, spec: spec, created: start, lastActive: start, state: agentproto.SandboxCreating,
		dir:      filepath.Join(m.cfg.StateDir, "sandboxes", spec.ID),
		cgroup:   filepath.Join(m.cgroups, spec.ID),
		stopping: make(chan struct{}), stopped: make(chan struct{}), relife: make(chan time.Duration, 1),
	}
	sb.rootfs = filepath.Join(sb.dir, "rootfs")
	return sb
}

// discard removes what a sandbox that failed to start made.
func (m *Manager) discard(sb *sandbox) {
	sb.stopOnce.Do(func() {
		sb.mu.Lock()
		sb.state, sb.reason = agentproto.SandboxStopped, agentproto.ReasonKilled
		sb.mu.Unlock()
		close(sb.stopping)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.teardown(ctx, sb); err != nil {
			m.log.Error("clean up failed sandbox", "sandbox", sb.id, "err", err)
		}
		close(sb.stopped)
	})
}

func (m *Manager) start(ctx context.Context, sb *sandbox, t0 time.Time) error {
	tpl, err := m.template(ctx, sb.spec.Template, sb.spec.TemplateHotplugged)
	if err != nil {
		return err
	}
	sb.tpl = tpl
	if err := m.mountRoot(sb); err != nil {
		return err
	}
	caEnv, err := installCA(sb.rootfs, sb.spec.CAPEM)
	if err != nil {
		return err
	}
	vols, err := m.volumeMounts(sb.spec.Volumes)
	if err != nil {
		return err
	}
	cfg := ociConfig(bundleSpec{
		Hostname:       sb.spec.Hostname,
		InitPath:       m.cfg.InitPath,
		StubPath:       m.cfg.StubPath,
		InitIdle:       m.initIdle(sb.spec),
		Env:            sandboxEnv(append(egressEnv(caEnv), sb.spec.Env...)),
		Limits:         sb.spec.Limits,
		CgroupPath:     "/" + cgroupParent + "/" + sb.crunID,
		TemplateDevice: tpl.dev,
	})
	cfg.Mounts = append(cfg.Mounts, vols...)
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(sb.dir, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	ln, err := listenSeqpacket(sb.ctlPath())
	if err != nil {
		return err
	}
	sb.mu.Lock()
	sb.startup.Mounts = time.Since(t0)
	sb.mu.Unlock()

	err = m.crunRun(ctx, sb, ln)
	ln.Close() // init holds its own copy; with it gone, connecting fails
	if err != nil {
		return err
	}
	crunDone := time.Since(t0)
	pid, err := readPIDFile(filepath.Join(sb.dir, "init.pid"))
	if err != nil {
		return err
	}
	if err := loopbackUp(pid); err != nil {
		return err
	}
	if err := m.startEgress(sb, pid); err != nil {
		return err
	}
	watch, err := m.helloInit(ctx, sb)
	if err != nil {
		return err
	}
	initGone := make(chan struct{})
	go func() {
		defer close(initGone)
		var ignored initReply
		for {
			fds, err := recvInit(watch, &ignored)
			closeFDs(fds)
			if err != nil {
				return
			}
		}
	}()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.initPID, sb.watch, sb.initGone = pid, watch, initGone
	sb.startup.Crun, sb.startup.Ready = crunDone, time.Since(t0)
	sb.state = agentproto.SandboxRunning
	sb.lastActive = time.Now()
	return nil
}

// mountRoot makes the bundle: the overlay's writable layer on scratch/ (a
// quota'd folder of the VM's scratch disk: scratch.go), the overlay over the
// template as rootfs, and the sandbox's /workspace on rootfs/workspace.
func (m *Manager) mountRoot(sb *sandbox) error {
	if err := os.Mkdir(sb.dir, 0o700); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	scratch := filepath.Join(sb.dir, "scratch")
	if err := m.mountScratch(sb, scratch); err != nil {
		return err
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(scratch, d), 0o755); err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", sb.tpl.dir, filepath.Join(scratch, "upper"), filepath.Join(scratch, "work"))
	if err := mount("overlay", sb.rootfs, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return m.mountWorkspace(sb, filepath.Join(sb.rootfs, workspaceDir))
}

// inodesFor bounds a tmpfs's files: running out of them is ENOSPC too.
func inodesFor(mib int) int { return max(4096, mib*64) }

// crunRun is the sandbox's one crun call: `crun run --detach`, with the
// control listener as fd 3, started without address randomization
// (personality.go). crun's state lives in the bundle, so removing the
// bundle removes it: no `crun delete` either.
func (m *Manager) crunRun(ctx context.Context, sb *sandbox, ln *os.File) error {
	logPath := filepath.Join(sb.dir, "init.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("crun run: %w", err)
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("crun run: %w", err)
	}
	defer devnull.Close()
	argv := []string{"crun", "--root", filepath.Join(sb.dir, "crun"), "run", "--detach",
		"--bundle", sb.dir, "--pid-file", filepath.Join(sb.dir, "init.pid"), "--preserve-fds", "1", sb.crunID}
	p, done, err := m.startMaybeASLR(true, argv, &os.ProcAttr{
		Dir:   sb.dir,
		Env:   []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: []*os.File{devnull, logf, logf, ln},
	})
	if err != nil {
		return fmt.Errorf("crun run: %w", err)
	}
	defer p.Release()
	var ws unix.WaitStatus
	select {
	case ws = <-done:
	case <-ctx.Done():
		p.Kill()
		<-done
		return fmt.Errorf("crun run: %w", ctx.Err())
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("crun run: exit %d signal %v: %s", ws.ExitStatus(), ws.Signal(), tailString(string(b), 600))
	}
	return nil
}

func tailString(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// listenSeqpacket makes the control listener: only root may connect (0600),
// and only the agent holds the path.
func listenSeqpacket(path string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := unix.Chmod(path, 0o600); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := unix.Listen(fd, 64); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("init pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("init pid %q: bad pid file", b)
	}
	return pid, nil
}

// loopbackUp brings up lo in the network namespace of pid: the sandbox's
// only interface, for its own servers and the egress proxy listener.
func loopbackUp(pid int) error {
	fd, err := socketInNetns(pid, unix.AF_INET, unix.SOCK_DGRAM)
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// dialInit connects to the sandbox's init.
func dialInit(ctx context.Context, sb *sandbox) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", sb.ctlPath())
	if err != nil {
		return nil, fmt.Errorf("dial sandbox init: %w", err)
	}
	return c.(*net.UnixConn), nil
}

// helloInit waits for the sandbox's init to answer and returns the
// connection that, held open, tells when it dies.
func (m *Manager) helloInit(ctx context.Context, sb *sandbox) (*net.UnixConn, error) {
	c, err := dialInit(ctx, sb)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if err := sendInit(c, initRequest{Op: initOpHello}); err != nil {
		c.Close()
		return nil, err
	}
	var rep initReply
	fds, err := recvInit(c, &rep)
	closeFDs(fds)
	if err != nil {
		c.Close()
		b, _ := os.ReadFile(filepath.Join(sb.dir, "init.log"))
		return nil, fmt.Errorf("sandbox init hello: %w: %s", err, tailString(string(b), 600))
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// supervise stops the sandbox when its lifetime passes, it idles too long,
// or its init dies.
func (m *Manager) supervise(sb *sandbox) {
	var lifetime, idle <-chan time.Time
	life := time.NewTimer(time.Duration(sb.spec.LifetimeSeconds) * time.Second)
	defer life.Stop()
	if sb.spec.LifetimeSeconds > 0 {
		lifetime = life.C
	} else {
		life.Stop()
	}
	idleMax := time.Duration(sb.spec.IdleSeconds) * time.Second
	if idleMax > 0 {
		t := time.NewTicker(min(max(idleMax/10, 100*time.Millisecond), 5*time.Second))
		defer t.Stop()
		idle = t.C
	}
	initGone := sb.initGone
	for {
		select {
		case now := <-lifetime:
			if d := sb.lifetimeCredit(now); d > 0 { // time paused does not count
				life.Reset(d)
				continue
			}
			m.stop(sb, agentproto.ReasonTimeout)
			return
		case d := <-sb.relife:
			sb.lifetimeCredit(time.Now()) // a new lifetime counts from now: drop the credit of earlier pauses
			life.Stop()
			life.Reset(d)
			lifetime = life.C
		case now := <-idle:
			if sb.idleFor(now) >= idleMax {
				m.stop(sb, agentproto.ReasonIdle)
				return
			}
		case <-initGone:
			reason := agentproto.ReasonKilled
			if oomKills(sb.cgroup) > 0 {
				reason = agentproto.ReasonOOM
			}
			m.stop(sb, reason)
			return
		case <-sb.stopping:
			return
		}
	}
}

// stop ends a sandbox's processes and frees what it held, keeping its
// record (state stopped) for the host to see why. The first reason wins.
func (m *Manager) stop(sb *sandbox, reason string) {
	sb.stopOnce.Do(func() {
		sb.mu.Lock()
		sb.state, sb.reason = agentproto.SandboxStopped, reason
		sb.mu.Unlock()
		close(sb.stopping)
		m.thawForStop(sb)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// The final sample is read once every process is gone and before
		// the cgroup goes: the host bills from it.
		if err := emptyCgroup(ctx, sb.cgroup); err != nil {
			m.log.Warn("stop sandbox: kill its processes", "sandbox", sb.id, "err", err)
		}
		var st agentproto.SandboxStats
		m.fillStats(sb, &st)
		st.State = agentproto.SandboxStopped
		sb.mu.Lock()
		sb.final = &st
		sb.mu.Unlock()
		if err := m.teardown(ctx, sb); err != nil {
			m.log.Error("stop sandbox", "sandbox", sb.id, "err", err)
		}
		m.log.Info("sandbox stopped", "sandbox", sb.id, "reason", reason)
		close(sb.stopped)
	})
	<-sb.stopped
}

// teardown kills every process of the sandbox and removes its cgroup,
// mounts and bundle (crun's state included).
func (m *Manager) teardown(ctx context.Context, sb *sandbox) error {
	var errs []error
	if err := killCgroup(ctx, sb.cgroup); err != nil {
		errs = append(errs, err)
	}
	sb.mu.Lock()
	if sb.watch != nil {
		sb.watch.Close()
	}
	sb.mu.Unlock()
	for _, p := range []string{filepath.Join(sb.rootfs, workspaceDir), sb.rootfs, filepath.Join(sb.dir, "scratch")} {
		if err := unmount(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(sb.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove bundle: %w", err))
	}
	if err := m.removeScratch(sb); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unmount unmounts p if it is a mount point; a busy one is detached.
func unmount(p string) error {
	err := unix.Unmount(p, 0)
	switch {
	case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.EBUSY):
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
		return nil
	default:
		return fmt.Errorf("unmount %s: %w", p, err)
	}
}

func (m *Manager) get(id string) (*sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, ok := m.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, agentproto.ErrNotFound)
	}
	return sb, nil
}

// Destroy stops a sandbox (reason "destroyed") if it still runs and removes
// its record. It returns the sandbox's last state.
func (m *Manager) Destroy(ctx context.Context, id string) (agentproto.SandboxInfo, error) {
	sb, err := m.get(id)
	if err != nil {
		return agentproto.SandboxInfo{}, fmt.Errorf("destroy sandbox: %w", err)
	}
	sb.mu.Lock()
	creating := sb.state == agentproto.SandboxCreating
	sb.mu.Unlock()
	if creating {
		return agentproto.SandboxInfo{}, fmt.Errorf("destroy sandbox %s: still being created: %w", id, agentproto.ErrConflict)
	}
	done := make(chan struct{})
	go func() { m.stop(sb, agentproto.ReasonDestroyed); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return agentproto.SandboxInfo{}, fmt.Errorf("destroy sandbox %s: %w", id, ctx.Err())
	}
	m.mu.Lock()
	if m.sandboxes[id] == sb {
		delete(m.sandboxes, id)
	}
	m.mu.Unlock()
	m.execs.dropSandbox(id)
	info := sb.info()
	info.State = agentproto.SandboxDestroyed
	m.log.Info("sandbox destroyed", "sandbox", id)
	return info, nil
}

// List returns every sandbox and template.
func (m *Manager) List() agentproto.SandboxList {
	m.mu.Lock()
	sbs := make([]*sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		sbs = append(sbs, sb)
	}
	m.mu.Unlock()
	out := agentproto.SandboxList{Sandboxes: make([]agentproto.SandboxInfo, 0, len(sbs)), Templates: m.templates.list()}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, sb.info())
	}
	sort.Slice(out.Sandboxes, func(i, j int) bool { return out.Sandboxes[i].ID < out.Sandboxes[j].ID })
	return out
}

// Stats samples a sandbox's usage; a stopped one reports its last sample.
func (m *Manager) Stats(id string) (agentproto.SandboxStats, error) {
	sb, err := m.get(id)
	if err != nil {
		return agentproto.SandboxStats{}, fmt.Errorf("sandbox stats: %w", err)
	}
	sb.mu.Lock()
	state, final := sb.state, sb.final
	sb.mu.Unlock()
	if final != nil {
		st := *final
		st.State = state
		return st, nil
	}
	if state != agentproto.SandboxRunning {
		return agentproto.SandboxStats{}, fmt.Errorf("sandbox %s is %s: %w", id, state, agentproto.ErrConflict)
	}
	var st agentproto.SandboxStats
	if err := m.fillStats(sb, &st); err != nil {
		return agentproto.SandboxStats{}, fmt.Errorf("sandbox stats %s: %w", id, err)
	}
	return st, nil
}

func (m *Manager) fillStats(sb *sandbox, st *agentproto.SandboxStats) error {
	st.ID = sb.id
	sb.mu.Lock()
	st.State, st.Paused = sb.state, sb.pause.paused
	sb.mu.Unlock()
	st.SampledAtGuest = time.Now()
	err := cgroupStats(sb.cgroup, st)
	st.DiskUsed, st.DiskSize = fsUsage(filepath.Join(sb.dir, "scratch"))
	st.WorkspaceUsed, st.WorkspaceSize = fsUsage(filepath.Join(sb.rootfs, workspaceDir))
	return err
}

// counts says what the guest holds for sandboxes: cgroups, bundle folders
// and records.
func (m *Manager) counts() (cgroups, bundles, records int) {
	if entries, err := os.ReadDir(m.cgroups); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				cgroups++
			}
		}
	}
	if entries, err := os.ReadDir(filepath.Join(m.cfg.StateDir, "sandboxes")); err == nil {
		bundles = len(entries)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return cgroups, bundles, len(m.sandboxes)
}

func fsUsage(p string) (used, size uint64) {
	var s unix.Statfs_t
	if err := unix.Statfs(p, &s); err != nil {
		return 0, 0
	}
	bs := uint64(s.Bsize)
	return (s.Blocks - s.Bfree) * bs, s.Blocks * bs
}

// defaultInitIdle is how long a sandbox idles before its init hands PID 1
// to the stub init (ManagerConfig.InitIdle).
const defaultInitIdle = 3 * time.Second

// initIdle is the sandbox's idle time before the stub init takes PID 1;
// 0 when it never does.
func (m *Manager) initIdle(spec agentproto.SandboxSpec) time.Duration {
	switch {
	case spec.InitIdleMillis < 0 || m.cfg.InitIdle < 0:
		return 0
	case spec.InitIdleMillis > 0:
		return time.Duration(spec.InitIdleMillis) * time.Millisecond
	}
	return m.cfg.InitIdle
}
