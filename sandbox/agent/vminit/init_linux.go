// Package vminit is PID 1 of a Stockade VM (stockade-agent as /init): it
// mounts the guest's file systems, loads its modules, reaps, finds the
// virtio-serial channel and serves the agent (sandbox/agent) on it.
package vminit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agent"
	"github.com/stockade-dev/stockade/sandbox/agent/reaper"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

const (
	// newRoot is where the initramfs is bound before it becomes the root.
	newRoot = "/newroot"
	// ModuleListName is the file under /lib/modules/<release>/ that lists the
	// modules init loads, one path relative to that folder per line, in order.
	// Those before a ModuleListLater line are loaded before the channel opens;
	// the rest once the first host said hello.
	ModuleListName = "modules.stockade"
	// ModuleListLater separates the two parts of the module list.
	ModuleListLater = "later:"
	// hostPoll is how often the agent looks for a (re)connected host.
	hostPoll = 100 * time.Millisecond
	// laterModulesDelay bounds how long the later modules wait for a
	// host's first hello.
	laterModulesDelay = 2 * time.Second
)

// bootState is the boot timings, written by init while the server reads them.
type bootState struct {
	mu   sync.Mutex
	boot agentproto.Boot
}

func (b *bootState) set(f func(*agentproto.Boot)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.boot)
}

func (b *bootState) get() agentproto.Boot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boot
}

// Init is main for stockade-agent as PID 1. It returns only when boot fails;
// the caller then powers off (PID 1 must never exit: the kernel panics).
func Init(ctx context.Context, version string, log *slog.Logger) error {
	var bs bootState
	bs.set(func(b *agentproto.Boot) { b.InitStart = agent.Uptime() })

	if err := agent.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	onRootfs, err := rootIsRootfs("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	if onRootfs {
		// pivot_root (crun) fails on the initramfs rootfs: make a bind
		// mount of it the root. No re-exec: chroot holds for every thread,
		// and under TCG a new process image costs ~0.3 s of translation.
		if err := unix.Unmount("/proc", 0); err != nil {
			return fmt.Errorf("unmount /proc: %w", err)
		}
		if err := switchRoot(); err != nil {
			return err
		}
		bs.set(func(b *agentproto.Boot) { b.SwitchRoot = agent.Uptime() })
		if err := agent.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	if err := mountAll(); err != nil {
		return err
	}
	// Transparent huge pages only for processes that ask (madvise): under
	// "always" every sandbox's init faults its Go heap in as 2 MiB pages,
	// 2-4 MiB of private memory per idle sandbox instead of about 1.
	if err := os.WriteFile("/sys/kernel/mm/transparent_hugepage/enabled", []byte("madvise"), 0); err != nil {
		log.Warn("transparent huge pages stay as they are", "err", err)
	}
	// Sandbox quotas bind the agent's own writes into sandboxes too.
	if err := agent.DropQuotaOverride(); err != nil {
		return err
	}
	bs.set(func(b *agentproto.Boot) { b.Mounted = agent.Uptime() })

	release := agent.KernelRelease()
	modDir := filepath.Join("/lib/modules", release)
	now, later, err := readModuleList(modDir)
	if err != nil {
		return err
	}

	r := reaper.New(log)
	go r.Loop(ctx)
	go handleSignals(ctx, log)

	if err := loadModules(now); err != nil {
		return err
	}
	bs.set(func(b *agentproto.Boot) { b.ChannelModules = agent.Uptime(); b.Modules = len(now) })
	port, err := findPort(ctx, "/sys/class/virtio-ports", agentproto.ChannelName, log)
	if err != nil {
		return err
	}
	f, err := openPort(port)
	if err != nil {
		return err
	}
	bs.set(func(b *agentproto.Boot) { b.ChannelOpen = agent.Uptime() })

	// The initramfs's /init is this binary: it becomes every sandbox's
	// init. A guest without working cgroups still serves the host, without
	// the sandbox ops.
	disksReady := make(chan struct{})
	sandboxes, err := agent.NewManager(agent.ManagerConfig{
		Logger: log, InitPath: "/init", DisksReady: disksReady, Start: r.Start,
	})
	if err != nil {
		log.Error("sandboxes unavailable", "err", err)
		sandboxes = nil
	}
	helloed := make(chan struct{})
	var helloOnce sync.Once
	srv, err := agent.NewServer(agent.Config{
		Version: version, Logger: log, PowerOff: PowerOff, PID1: true, Boot: bs.get, Run: r.Run,
		Sandboxes: sandboxes, OnHello: func() { helloOnce.Do(func() { close(helloed) }) },
	})
	if err != nil {
		return err
	}

	// The log line and the rest of the modules (block, file systems) wait
	// for the first host's hello, or laterModulesDelay: nothing served
	// before needs them, and on one emulated CPU loading them (ext4 alone is
	// 2 MiB) while the handshake ran delayed it by ~70 ms.
	go func() {
		defer close(disksReady)
		t := time.NewTimer(laterModulesDelay)
		defer t.Stop()
		select {
		case <-helloed:
		case <-t.C:
		case <-ctx.Done():
			return
		}
		b := bs.get()
		log.Info("agent ready", "version", version, "kernel", release, "port", port,
			"init_start", b.InitStart, "switch_root", b.SwitchRoot, "channel_modules", b.ChannelModules, "channel", b.ChannelOpen)
		if err := loadModules(later); err != nil {
			log.Error("load modules", "err", err)
			return
		}
		bs.set(func(b *agentproto.Boot) { b.ModulesLoaded = agent.Uptime(); b.Modules += len(later) })
	}()
	return serveChannel(ctx, srv, port, f, log)
}

// PowerOff syncs and powers the machine off; it returns only on failure.
func PowerOff() error {
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		return fmt.Errorf("power off: %w", err)
	}
	return nil
}

func mountAll() error {
	const nsx = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	mounts := []struct {
		src, target, fstype string
		flags               uintptr
		data                string
	}{
		{"sysfs", "/sys", "sysfs", nsx, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"},
		{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", nsx, "nsdelegate"},
	}
	for _, m := range mounts {
		if err := agent.Mount(m.src, m.target, m.fstype, m.flags, m.data); err != nil {
			return err
		}
	}
	return nil
}

// rootIsRootfs reports whether / is still the kernel's initramfs rootfs.
func rootIsRootfs(mountinfo string) (bool, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return false, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 1 || fields[4] != "/" {
			continue
		}
		return tail[0] == "rootfs", nil
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read mountinfo: %w", err)
	}
	return false, errors.New("read mountinfo: no mount on /")
}

// switchRoot makes a bind mount of the initramfs the root of this process.
// crun's pivot_root needs a root mount that has a parent, which the rootfs
// itself never has; a bind mount of it does. Nothing is copied: under TCG
// copying the initramfs into a tmpfs cost ~160 ms of boot.
func switchRoot() error {
	if err := os.MkdirAll(newRoot, 0o755); err != nil {
		return fmt.Errorf("switch root: %w", err)
	}
	if err := unix.Mount("/", newRoot, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("switch root: bind /: %w", err)
	}
	if err := unix.Chdir(newRoot); err != nil {
		return fmt.Errorf("switch root: chdir: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("switch root: move mount: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("switch root: chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("switch root: chdir /: %w", err)
	}
	// The folder the bind sat on is an empty one of the rootfs now.
	os.Remove(newRoot)
	return nil
}

// readModuleList reads dir/ModuleListName: the modules to load before the
// channel opens and those to load after.
func readModuleList(dir string) (now, later []string, err error) {
	list, err := os.ReadFile(filepath.Join(dir, ModuleListName))
	if err != nil {
		return nil, nil, fmt.Errorf("read module list: %w", err)
	}
	part := &now
	for _, line := range strings.Fields(string(list)) {
		if line == ModuleListLater {
			part = &later
			continue
		}
		*part = append(*part, filepath.Join(dir, line))
	}
	return now, later, nil
}

// loadModules loads modules in order. One already loaded (built in, or
// loaded twice) is not an error.
func loadModules(paths []string) error {
	for _, p := range paths {
		if err := loadModule(p); err != nil {
			return err
		}
	}
	return nil
}

func loadModule(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("load module %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.FinitModule(fd, "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load module %s: %w", path, err)
	}
	return nil
}

// findPort waits for the virtio-serial port called name to appear (the
// driver probes it asynchronously) and returns its /dev path.
func findPort(ctx context.Context, sysDir, name string, log *slog.Logger) (string, error) {
	warned := false
	start := time.Now()
	for {
		names, err := filepath.Glob(filepath.Join(sysDir, "vport*", "name"))
		if err != nil {
			return "", fmt.Errorf("find port %s: %w", name, err)
		}
		for _, p := range names {
			b, err := os.ReadFile(p)
			if err == nil && strings.TrimSpace(string(b)) == name {
				dev := "/dev/" + filepath.Base(filepath.Dir(p))
				if _, err := os.Stat(dev); err == nil {
					return dev, nil
				}
			}
		}
		if !warned && time.Since(start) > 10*time.Second {
			log.Warn("virtio-serial port not found yet; still looking", "name", name)
			warned = true
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("find port %s: %w", name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// openPort opens a virtio-serial port: close-on-exec so no child ever holds
// it (only one opener is allowed), non-blocking so Go's poller drives it and
// Close wakes a write blocked on an absent host.
func openPort(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open port %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// serveChannel serves the port forever. While no host is connected reads
// return EOF: serveLink polls. A failing port is reopened.
func serveChannel(ctx context.Context, srv *agent.Server, path string, f *os.File, log *slog.Logger) error {
	for {
		err := srv.ServeLink(ctx, f, hostPoll)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Error("serve channel; reopening", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if f, err = openPort(path); err != nil {
			return err
		}
	}
}

// handleSignals keeps signals from killing PID 1 (Go's default for SIGTERM
// is to exit, which panics the kernel) and powers off on the ones that mean
// "shut down".
func handleSignals(ctx context.Context, log *slog.Logger) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, unix.SIGTERM, unix.SIGINT, unix.SIGPWR, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2)
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-ch:
			log.Info("signal", "signal", sig)
			if sig == unix.SIGTERM || sig == unix.SIGINT || sig == unix.SIGPWR {
				if err := PowerOff(); err != nil {
					log.Error("power off", "err", err)
				}
			}
		}
	}
}
