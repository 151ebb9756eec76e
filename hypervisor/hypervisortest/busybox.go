package hypervisortest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
)

// DefaultCacheDir keeps downloaded kernels between runs.
const DefaultCacheDir = "/var/tmp/stockade-cache"

// BusyboxChannel is the virtio-serial port the busybox guest answers on.
const BusyboxChannel = "org.stockade.agent.0"

// Guest is a bootable kernel + initramfs pair on the local libvirt host.
type Guest struct {
	Kernel    string // uncompressed vmlinux
	Initramfs string
	Cmdline   string
	Channel   string // virtio-serial port name the guest listens on
}

// Spec is a domain spec booting this guest with the sizes GUEST.md measured
// (1 vCPU, 512 MiB), ready for Host.Create.
func (g Guest) Spec(id, tenant string) hypervisor.DomainSpec {
	return hypervisor.DomainSpec{
		ID:          id,
		TenantID:    tenant,
		VCPUs:       1,
		MemoryMiB:   512,
		Kernel:      g.Kernel,
		Initramfs:   g.Initramfs,
		Cmdline:     g.Cmdline,
		ChannelName: g.Channel,
	}
}

// guestCmdline: serial console, no waiting for hardware that is not there,
// and the channel name for /init.
const guestCmdline = "console=ttyS0 quiet panic=-1 mitigations=off tsc=reliable no_timer_check 8250.nr_uarts=1 " +
	"i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd rdinit=/init stockade.channel="

// The modules /init loads, in the order GUEST.md found to work, then the
// ACPI power button and evdev so acpid can turn Host.Shutdown into poweroff.
var guestModules = []string{
	"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
	"virtio_console", "virtio_balloon", "virtio_blk", "button", "evdev",
}

// guestInit is the baseline guest's PID 1: busybox only. It prints
// "READY <uptime>" once on the channel, then echoes every line back; "uptime"
// answers "UPTIME <s>", "poweroff" answers "BYE" and powers off.
const guestInit = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in ` + "MODULES" + `; do
	insmod /lib/modules/$m.ko || echo "init: insmod $m failed"
done
acpid -c /etc/acpi -l /dev/null
name=
for w in $(cat /proc/cmdline); do
	case "$w" in stockade.channel=*) name=${w#stockade.channel=} ;; esac
done
dev=
i=0
while [ -z "$dev" ]; do
	for p in /sys/class/virtio-ports/vport*; do
		[ "$(cat "$p/name" 2>/dev/null)" = "$name" ] && dev=/dev/${p##*/}
	done
	if [ -z "$dev" ]; then
		i=$((i + 1))
		if [ "$i" -gt 400 ]; then echo "init: no virtio port named $name"; poweroff -f; fi
		sleep 0.05
	fi
done
while [ ! -c "$dev" ]; do sleep 0.01; done
ready="READY $(cut -d' ' -f1 /proc/uptime)"
echo "init: $name is $dev"
# Keep the port open: data the host sends while the guest has it closed is
# dropped. While the host side is closed reads return EOF: poll again.
exec 3<>"$dev"
echo "$ready" >&3
while :; do
	while read -r line <&3; do
		case "$line" in
		poweroff) echo BYE >&3; poweroff -f ;;
		uptime) echo "UPTIME $(cut -d' ' -f1 /proc/uptime)" >&3 ;;
		*) echo "$line" >&3 ;;
		esac
	done
	sleep 0.05
done
`

// acpiPowerButton is what busybox acpid runs for the power button.
const acpiPowerButton = "#!/bin/sh\npoweroff -f\n"

// BusyboxGuest builds the baseline guest into dir (a kernel from the cache,
// downloaded once). Without the Debian tools it needs the test is
// Unavailable.
func BusyboxGuest(tb testing.TB, dir string) Guest {
	tb.Helper()
	for _, tool := range []string{"apt-cache", "apt-get", "dpkg-deb", "xz", "/bin/busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			Unavailable(tb, fmt.Sprintf("busybox guest needs %s: %v", tool, err))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := BuildBusyboxGuest(ctx, DefaultCacheDir, dir)
	if err != nil {
		tb.Fatalf("build busybox guest: %v", err)
	}
	return g
}

// BuildBusyboxGuest makes the baseline guest: Debian's stock kernel
// (linux-image-amd64, uncompressed) and an initramfs of busybox-static, the
// virtio modules and the /init above. The kernel is cached in cacheDir by
// package version; the initramfs is written to dir (world-readable, as QEMU
// runs as another user).
func BuildBusyboxGuest(ctx context.Context, cacheDir, dir string) (Guest, error) {
	k, err := DebianKernel(ctx, cacheDir)
	if err != nil {
		return Guest{}, err
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return Guest{}, fmt.Errorf("read busybox (apt-get install busybox-static): %w", err)
	}
	if !isStatic(busybox) {
		return Guest{}, errors.New("/bin/busybox is not static (apt-get install busybox-static)")
	}
	entries := []cpioEntry{
		{Name: "bin", Mode: modeDir | 0o755},
		{Name: "dev", Mode: modeDir | 0o755},
		{Name: "dev/console", Mode: modeChar | 0o600, Major: 5, Minor: 1},
		{Name: "etc", Mode: modeDir | 0o755},
		{Name: "etc/acpi", Mode: modeDir | 0o755},
		{Name: "etc/acpi/PWRF", Mode: modeDir | 0o755},
		{Name: "etc/acpi/PWRF/00000080", Mode: modeFile | 0o755, Data: []byte(acpiPowerButton)},
		{Name: "lib", Mode: modeDir | 0o755},
		{Name: "lib/modules", Mode: modeDir | 0o755},
		{Name: "proc", Mode: modeDir | 0o755},
		{Name: "sys", Mode: modeDir | 0o755},
		{Name: "bin/busybox", Mode: modeFile | 0o755, Data: busybox},
		{Name: "init", Mode: modeFile | 0o755,
			Data: []byte(strings.Replace(guestInit, "MODULES", strings.Join(guestModules, " "), 1))},
	}
	for _, m := range guestModules {
		data, err := os.ReadFile(filepath.Join(k.ModulesDir, m+".ko"))
		if err != nil {
			return Guest{}, fmt.Errorf("busybox guest: module %s: %w", m, err)
		}
		entries = append(entries, cpioEntry{Name: "lib/modules/" + m + ".ko", Mode: modeFile | 0o644, Data: data})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Guest{}, fmt.Errorf("busybox guest: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return Guest{}, fmt.Errorf("busybox guest: %w", err)
	}
	var buf bytes.Buffer
	if err := writeCPIO(&buf, entries); err != nil {
		return Guest{}, fmt.Errorf("busybox guest: %w", err)
	}
	initramfs := filepath.Join(dir, "busybox-initramfs.cpio")
	if err := writeFileAtomic(initramfs, buf.Bytes(), 0o644); err != nil {
		return Guest{}, fmt.Errorf("busybox guest: %w", err)
	}
	return Guest{
		Kernel:    k.Vmlinux,
		Initramfs: initramfs,
		Cmdline:   guestCmdline + BusyboxChannel,
		Channel:   BusyboxChannel,
	}, nil
}

// Kernel is an unpacked Debian kernel package.
type Kernel struct {
	Package    string // e.g. linux-image-6.1.0-57-amd64
	Version    string // e.g. 6.1.192-3
	Vmlinux    string // uncompressed, booted directly via PVH
	ModulesDir string // the few .ko files the test guests need, flat
}

// The module files kept from the package (of ~4000).
var keptModules = regexp.MustCompile(`^\./lib/modules/[^/]+/kernel/drivers/(virtio/[^/]+|char/virtio_console|block/virtio_blk|acpi/button|input/evdev)\.ko$`)

var dependsRE = regexp.MustCompile(`(?m)^Depends:\s*(linux-image-[^\s,(]+)\s*\(=\s*([^)\s]+)\)`)

// DebianKernel returns Debian's current linux-image-amd64 kernel, fetched with
// apt-get download and unpacked into cacheDir once per package version.
func DebianKernel(ctx context.Context, cacheDir string) (Kernel, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "show", "--no-all-versions", "linux-image-amd64").Output()
	if err != nil {
		if k, ok := newestCachedKernel(cacheDir); ok {
			return k, nil // offline, but we have one
		}
		return Kernel{}, fmt.Errorf("find kernel package (run apt-get update): apt-cache show linux-image-amd64: %w", err)
	}
	m := dependsRE.FindSubmatch(out)
	if m == nil {
		return Kernel{}, fmt.Errorf("find kernel package: no versioned Depends in apt-cache show linux-image-amd64")
	}
	k := kernelIn(cacheDir, string(m[1]), string(m[2]))
	if k.complete() {
		return k, nil
	}

	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Kernel{}, fmt.Errorf("kernel cache: %w", err)
	}
	unlock, err := lockFile(filepath.Join(cacheDir, ".kernel.lock"))
	if err != nil {
		return Kernel{}, err
	}
	defer unlock()
	if k.complete() { // another process finished it while we waited
		return k, nil
	}
	tmp, err := os.MkdirTemp(cacheDir, ".kernel-")
	if err != nil {
		return Kernel{}, fmt.Errorf("kernel cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := fetchKernel(ctx, tmp, k); err != nil {
		return Kernel{}, err
	}
	dir := filepath.Dir(k.Vmlinux)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return Kernel{}, fmt.Errorf("kernel cache: %w", err)
	}
	if err := os.Chmod(filepath.Join(tmp, "out"), 0o755); err != nil {
		return Kernel{}, err
	}
	if err := os.Rename(filepath.Join(tmp, "out"), dir); err != nil {
		return Kernel{}, fmt.Errorf("kernel cache: %w", err)
	}
	return k, nil
}

func kernelIn(cacheDir, pkg, version string) Kernel {
	dir := filepath.Join(cacheDir, "kernel", pkg+"_"+version)
	return Kernel{
		Package:    pkg,
		Version:    version,
		Vmlinux:    filepath.Join(dir, "vmlinux"),
		ModulesDir: filepath.Join(dir, "modules"),
	}
}

func (k Kernel) complete() bool {
	if _, err := os.Stat(k.Vmlinux); err != nil {
		return false
	}
	for _, m := range guestModules {
		if _, err := os.Stat(filepath.Join(k.ModulesDir, m+".ko")); err != nil {
			return false
		}
	}
	return true
}

func newestCachedKernel(cacheDir string) (Kernel, bool) {
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "kernel", "linux-image-*_*"))
	for i := len(dirs) - 1; i >= 0; i-- {
		pkg, version, _ := strings.Cut(filepath.Base(dirs[i]), "_")
		if k := kernelIn(cacheDir, pkg, version); k.complete() {
			return k, true
		}
	}
	return Kernel{}, false
}

// fetchKernel downloads the package into tmp and unpacks vmlinux and the
// modules into tmp/out.
func fetchKernel(ctx context.Context, tmp string, k Kernel) error {
	get := exec.CommandContext(ctx, "apt-get", "download", "-q", k.Package+"="+k.Version)
	get.Dir = tmp
	if out, err := get.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s=%s: %w: %s", k.Package, k.Version, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s: got %d .deb files", k.Package, len(debs))
	}
	outDir := filepath.Join(tmp, "out")
	if err := os.MkdirAll(filepath.Join(outDir, "modules"), 0o755); err != nil {
		return err
	}

	// dpkg-deb gives the data tar; we keep only what the guests need.
	unpack := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", debs[0])
	stdout, err := unpack.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	unpack.Stderr = &stderr
	if err := unpack.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	var vmlinuz []byte
	tr := tar.NewReader(bufio.NewReader(stdout))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			_ = unpack.Wait()
			return fmt.Errorf("read %s: %w", debs[0], err)
		}
		switch {
		case strings.HasPrefix(h.Name, "./boot/vmlinuz-"):
			if vmlinuz, err = io.ReadAll(tr); err != nil {
				return err
			}
		case keptModules.MatchString(h.Name):
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(outDir, "modules", path.Base(h.Name)), data, 0o644); err != nil {
				return err
			}
		}
	}
	if err := unpack.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile: %w: %s", err, stderr.Bytes())
	}
	if vmlinuz == nil {
		return fmt.Errorf("%s has no /boot/vmlinuz-*", debs[0])
	}
	vmlinux, err := decompressVmlinuz(ctx, vmlinuz)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(outDir, "vmlinux"), vmlinux, 0o644)
}

// decompressVmlinuz extracts the ELF kernel from a bzImage: the payload is an
// xz stream somewhere inside. Booting the ELF directly saves ~6 s under TCG.
func decompressVmlinuz(ctx context.Context, bz []byte) ([]byte, error) {
	off := bytes.Index(bz, []byte("\xfd7zXZ\x00"))
	if off < 0 {
		return nil, errors.New("vmlinuz: no xz payload")
	}
	cmd := exec.CommandContext(ctx, "xz", "-dc", "--single-stream")
	cmd.Stdin = bytes.NewReader(bz[off:])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("xz -d vmlinuz payload: %w: %s", err, stderr.Bytes())
	}
	if !bytes.HasPrefix(out, []byte("\x7fELF")) {
		return nil, errors.New("vmlinuz payload is not an ELF kernel")
	}
	return out, nil
}

func isStatic(elf []byte) bool {
	// A dynamic executable names its interpreter.
	return bytes.HasPrefix(elf, []byte("\x7fELF")) && !bytes.Contains(elf[:min(len(elf), 4096)], []byte("/lib64/ld-linux"))
}

func writeFileAtomic(name string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".tmp-"+filepath.Base(name))
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

// lockFile takes an exclusive flock, so parallel test binaries download once.
func lockFile(name string) (func(), error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
