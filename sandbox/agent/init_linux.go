package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

const (
	// newRoot is where the initramfs is copied before switching root.
	newRoot = "/newroot"
	// ModuleListName is the file under /lib/modules/<release>/ that lists the
	// modules init loads, one path relative to that folder per line, in order.
	// Those before a ModuleListLater line are loaded before the channel opens;
	// the rest load while the agent already serves.
	ModuleListName = "modules.stockade"
	// ModuleListLater separates the two parts of the module list.
	ModuleListLater = "later:"
	// hostPoll is how often the agent looks for a (re)connected host.
	hostPoll = 100 * time.Millisecond
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
	bs.set(func(b *agentproto.Boot) { b.InitStart = uptime() })

	if err := mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	onRootfs, err := rootIsRootfs("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	if onRootfs {
		// pivot_root (crun) fails on the initramfs rootfs: move it to a tmpfs.
		// No re-exec: chroot holds for every thread, and under TCG a new
		// process image costs ~0.3 s of translation.
		if err := unix.Unmount("/proc", 0); err != nil {
			return fmt.Errorf("unmount /proc: %w", err)
		}
		if err := switchRoot(); err != nil {
			return err
		}
		bs.set(func(b *agentproto.Boot) { b.SwitchRoot = uptime() })
		if err := mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	if err := mountAll(); err != nil {
		return err
	}
	bs.set(func(b *agentproto.Boot) { b.Mounted = uptime() })

	release := kernelRelease()
	modDir := filepath.Join("/lib/modules", release)
	now, later, err := readModuleList(modDir)
	if err != nil {
		return err
	}
	if err := loadModules(now); err != nil {
		return err
	}
	bs.set(func(b *agentproto.Boot) { b.ChannelModules = uptime(); b.Modules = len(now) })
	// The rest (block, file systems) load while the host already talks to us;
	// nothing served yet needs them.
	disksReady := make(chan struct{})
	go func() {
		defer close(disksReady)
		if err := loadModules(later); err != nil {
			log.Error("load modules", "err", err)
			return
		}
		bs.set(func(b *agentproto.Boot) { b.ModulesLoaded = uptime(); b.Modules += len(later) })
	}()

	r := newReaper(log)
	go r.loop(ctx)
	go handleSignals(ctx, log)

	port, err := findPort(ctx, "/sys/class/virtio-ports", agentproto.ChannelName, log)
	if err != nil {
		return err
	}
	f, err := openPort(port)
	if err != nil {
		return err
	}
	bs.set(func(b *agentproto.Boot) { b.ChannelOpen = uptime() })
	b := bs.get()
	log.Info("agent ready", "version", version, "kernel", release, "port", port,
		"init_start", b.InitStart, "switch_root", b.SwitchRoot, "channel_modules", b.ChannelModules, "channel", b.ChannelOpen)

	// The initramfs's /init (copied by switchRoot) is this binary: it
	// becomes every sandbox's init. A guest without working cgroups still
	// serves the host, without the sandbox ops.
	sandboxes, err := NewManager(ManagerConfig{
		Logger: log, InitPath: "/init", DisksReady: disksReady, start: r.start,
	})
	if err != nil {
		log.Error("sandboxes unavailable", "err", err)
		sandboxes = nil
	}
	srv, err := NewServer(Config{
		Version: version, Logger: log, PowerOff: PowerOff, PID1: true, Boot: bs.get, Run: r.Run,
		Sandboxes: sandboxes,
	})
	if err != nil {
		return err
	}
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

func mount(source, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("mount %s: %w", target, err)
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, target, err)
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
		if err := mount(m.src, m.target, m.fstype, m.flags, m.data); err != nil {
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

// switchRoot copies the initramfs into a tmpfs, deleting as it goes so the
// memory is not held twice, and makes the tmpfs the root of this process.
func switchRoot() error {
	if err := mount("tmpfs", newRoot, "tmpfs", 0, "mode=0755"); err != nil {
		return err
	}
	if err := moveTree("/", newRoot); err != nil {
		return fmt.Errorf("switch root: %w", err)
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
	return nil
}

// moveTree copies every file, link, folder and device node under src into
// dst, removing the source files it copied. dst itself is skipped.
func moveTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dst {
			return filepath.SkipDir
		}
		if path == src {
			return nil
		}
		target := filepath.Join(dst, strings.TrimPrefix(path, src))
		info, err := d.Info()
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return fmt.Errorf("stat %s: %w", path, err)
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			if err := os.Mkdir(target, mode.Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case mode.IsRegular():
			if err := copyFile(path, target, mode.Perm()); err != nil {
				return err
			}
		default: // device nodes, fifos
			if err := unix.Mknod(target, st.Mode, int(st.Rdev)); err != nil {
				return fmt.Errorf("mknod %s: %w", target, err)
			}
		}
		// Keep owners and the exact mode (setuid, sticky) the archive had.
		if err := unix.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", target, err)
		}
		if mode&fs.ModeSymlink == 0 {
			if err := unix.Chmod(target, st.Mode&07777); err != nil {
				return fmt.Errorf("chmod %s: %w", target, err)
			}
		}
		if !mode.IsDir() {
			os.Remove(path)
		}
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
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
func serveChannel(ctx context.Context, srv *Server, path string, f *os.File, log *slog.Logger) error {
	for {
		err := srv.serveLink(ctx, f, hostPoll)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Error("serve channel; reopening", "err", err)
		if !sleepCtx(ctx, time.Second) {
			return ctx.Err()
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
