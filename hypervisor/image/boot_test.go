package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

const libvirtURI = "qemu:///system"

// needLibvirt skips (or fails under CI) without a reachable libvirtd.
func needLibvirt(t *testing.T) {
	t.Helper()
	needTool(t, "virsh")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "virsh", "-c", libvirtURI, "version").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("libvirt at %s not reachable: %v: %s", libvirtURI, err, out)
		}
		t.Skipf("libvirt at %s not reachable (start it with scripts/libvirtd.sh): %v", libvirtURI, err)
	}
}

// bootDomain is the smallest VM that boots the guest: direct kernel boot
// under TCG, the agent channel on a unix socket, the console to a file,
// and disks (template images) attached read-only as vdb, vdc, ...
func bootDomain(name string, g Guest, sock, console string, memMiB uint, disks ...string) (string, error) {
	var dd []libvirtxml.DomainDisk
	for i, d := range disks {
		disk := libvirtxml.DomainDisk{
			Device:   "disk",
			Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
			Source:   &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: d}},
			Target:   &libvirtxml.DomainDiskTarget{Dev: "vd" + string(rune('b'+i)), Bus: "virtio"},
			ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		}
		if strings.HasSuffix(d, scratchTestName) { // the VM's scratch disk is writable
			disk.ReadOnly, disk.Driver.Discard = nil, "unmap"
		}
		dd = append(dd, disk)
	}
	dom := &libvirtxml.Domain{
		Type:   "qemu",
		Name:   name,
		Memory: &libvirtxml.DomainMemory{Value: memMiB, Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: 1},
		OS: &libvirtxml.DomainOS{
			Type:    &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "pc", Type: "hvm"},
			Kernel:  g.Kernel,
			Initrd:  g.Initramfs,
			Cmdline: g.Cmdline,
		},
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		OnPoweroff: "destroy", OnReboot: "destroy", OnCrash: "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Disks: dd,
			Serials: []libvirtxml.DomainSerial{{
				Source: &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: console}},
			}},
			Channels: []libvirtxml.DomainChannel{{
				Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: sock}},
				Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: agentproto.ChannelName}},
			}},
			MemBalloon: &libvirtxml.DomainMemBalloon{Model: "virtio", FreePageReporting: "on"},
		},
	}
	return dom.Marshal()
}

func virsh(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-c", libvirtURI}, args...)...).CombinedOutput()
	return string(out), err
}

// TestBoot boots the built guest in a real VM and talks to the real agent
// over the virtio-serial channel.
func TestBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM (seconds under TCG)")
	}
	needBuildTools(t)
	needLibvirt(t)
	agent := buildAgent(t, t.TempDir(), "test-boot")
	m, _ := buildTestImage(t, agent)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	suffix := make([]byte, 4)
	rand.Read(suffix)
	name := "stockade-imagetest-" + hex.EncodeToString(suffix)
	// The socket and console live where QEMU (its own user) can reach them.
	dir, err := os.MkdirTemp("/var/tmp", "stockade-boot-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	defer os.RemoveAll(dir)
	sock, console := filepath.Join(dir, "agent.sock"), filepath.Join(dir, "console.log")
	xml, err := bootDomain(name, m.Guest, sock, console, 512)
	if err != nil {
		t.Fatal(err)
	}
	xmlPath := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(xmlPath, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if out, err := virsh(ctx, "create", xmlPath); err != nil {
		t.Fatalf("virsh create = %v: %s", err, out)
	}
	defer func() {
		virsh(context.Background(), "destroy", name) // transient: destroy also removes it
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("guest console:\n%s", b)
		}
	}()

	dial := func(client string) *agentproto.Client {
		t.Helper()
		var conn net.Conn
		for conn == nil {
			c, err := net.Dial("unix", sock)
			if err == nil {
				conn = c
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("agent socket %s: %v", sock, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		dctx, dcancel := context.WithTimeout(ctx, 90*time.Second)
		defer dcancel()
		c, err := agentproto.Dial(dctx, conn, agentproto.ClientOptions{Name: client})
		if err != nil {
			t.Fatalf("Dial() = %v", err)
		}
		return c
	}
	c := dial("boot-test")
	t.Logf("virsh create -> hello: %v", time.Since(start).Round(time.Millisecond))

	h := c.Hello()
	if !h.PID1 || h.Kernel != m.Guest.KernelVersion || h.Agent != "test-boot" || h.SessionNumber != 1 {
		t.Errorf("Got(Hello()) = pid1 %v kernel %q agent %q session %d; want true %q %q 1",
			h.PID1, h.Kernel, h.Agent, h.SessionNumber, m.Guest.KernelVersion, "test-boot")
	}
	b := h.Boot
	t.Logf("guest boot: init %v, switch root %v, channel modules %v, channel %v, hello at uptime %v",
		b.InitStart, b.SwitchRoot, b.ChannelModules, b.ChannelOpen, h.Uptime)
	if !(0 < b.InitStart && b.InitStart <= b.SwitchRoot && b.SwitchRoot <= b.Mounted &&
		b.Mounted <= b.ChannelModules && b.ChannelModules <= b.ChannelOpen && b.ChannelOpen <= h.Uptime) {
		t.Errorf("Got(Hello().Boot) = %+v (uptime %v); want increasing steps", b, h.Uptime)
	}

	if _, err := c.Ping(ctx); err != nil {
		t.Errorf("Ping() = %v", err)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatalf("Stats() = %v", err)
	}
	if st.CPUs != 1 || st.MemTotal < 400<<20 || st.MemTotal > 512<<20 || st.MemAvailable == 0 {
		t.Errorf("Got(Stats()) = cpus %d mem %d/%d; want 1 cpu and 400-512 MiB", st.CPUs, st.MemAvailable, st.MemTotal)
	}
	for _, ctl := range []string{"cpu", "memory", "pids", "io"} {
		if !slices.Contains(st.CgroupControllers, ctl) {
			t.Errorf("Got(Stats().CgroupControllers) = %v; want %s", st.CgroupControllers, ctl)
		}
	}
	// crun answering proves its libraries and loader made it into the guest.
	if !strings.HasPrefix(st.Crun, "crun version ") {
		t.Errorf("Got(Stats().Crun) = %q; want crun's version", st.Crun)
	}

	// The host goes away and comes back: the agent starts a new session.
	c.Close()
	c = dial("boot-test-2")
	if got := c.Hello().SessionNumber; got != 2 {
		t.Errorf("Got(Hello().SessionNumber after reconnect) = %d; want 2", got)
	}
	// By now every module (ext4, overlay, ...) has loaded in the background.
	deadline := time.Now().Add(30 * time.Second)
	for c.Hello().Boot.ModulesLoaded == 0 && time.Now().Before(deadline) {
		c.Close()
		time.Sleep(500 * time.Millisecond)
		c = dial("boot-test-poll")
	}
	if b := c.Hello().Boot; b.ModulesLoaded < b.ChannelModules || b.Modules < 10 {
		t.Errorf("Got(Boot after background load) = %+v; want ModulesLoaded set and >= 10 modules", b)
	}

	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown() = %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Error("agent session still open 30 s after Shutdown()")
	}
	for {
		out, err := virsh(ctx, "domstate", name)
		if err != nil || !strings.Contains(out, "running") {
			break // a transient domain vanishes when it powers off
		}
		if ctx.Err() != nil {
			t.Fatalf("domain %s still %s after Shutdown()", name, strings.TrimSpace(out))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
