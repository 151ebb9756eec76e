package image

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testDataDir is kept across runs so the Debian packages download once.
// STOCKADE_TEST_DATA_DIR overrides it.
func testDataDir() string {
	if d := os.Getenv("STOCKADE_TEST_DATA_DIR"); d != "" {
		return d
	}
	return "/var/tmp/stockade-test-data"
}

// buildAgent compiles stockade-agent static into dir.
func buildAgent(t *testing.T, dir, version string) string {
	t.Helper()
	needTool(t, "go")
	out := filepath.Join(dir, "stockade-agent-"+version)
	if b, err := goBuildAgent(out, version); err != nil {
		t.Fatalf("go build stockade-agent: %v: %s", err, b)
	}
	return out
}

func goBuildAgent(out, version string) ([]byte, error) {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version,
		"-o", out, "github.com/stockade-dev/stockade/cmd/stockade-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd.CombinedOutput()
}

// needBuildTools skips (or fails under CI) when the machine cannot build images.
func needBuildTools(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("image build needs root")
		}
		t.Skip("image build needs root")
	}
	needTool(t, "apt-cache", "apt-get", "dpkg", "xz", "ldd", "mkfs.ext4", "debugfs", "cpio")
}

// buildTestImage builds the guest and the busybox template into the shared
// test data dir.
func buildTestImage(t *testing.T, agent string) (Manifest, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	m, err := Build(ctx, Options{DataDir: testDataDir(), AgentBinary: agent, Progress: &progress,
		Templates: []string{TemplateBusybox}})
	t.Logf("build:\n%s", progress.String())
	if err != nil {
		t.Fatalf("Build() = %v", err)
	}
	return m, progress.String()
}

func TestBuild(t *testing.T) {
	needBuildTools(t)
	agent := buildAgent(t, t.TempDir(), "test-build")
	m, _ := buildTestImage(t, agent)

	if f, err := elf.Open(m.Guest.Kernel); err != nil {
		t.Errorf("Got(kernel %s) = %v; want an ELF vmlinux", m.Guest.Kernel, err)
	} else {
		f.Close()
	}
	if m.Guest.KernelVersion == "" || m.Guest.Cmdline != Cmdline || len(m.Guest.Version) != 12 {
		t.Errorf("Got(Guest) = %+v; want kernel version, Cmdline and a 12-hex version", m.Guest)
	}
	if !strings.Contains(m.Guest.Kernel, "guest-"+m.Guest.Version) {
		t.Errorf("Got(kernel path) = %s; want it under guest-%s", m.Guest.Kernel, m.Guest.Version)
	}

	cmd := exec.Command("cpio", "-t", "--quiet")
	f, err := os.Open(m.Guest.Initramfs)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdin = f
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -t initramfs = %v", err)
	}
	names := strings.Fields(string(out))
	for _, want := range []string{"init", "usr/bin/crun", "lib64/ld-linux-x86-64.so.2",
		"lib/x86_64-linux-gnu/libseccomp.so.2", "dev/console",
		"lib/modules/" + m.Guest.KernelVersion + "/" + moduleListName,
		"lib/modules/" + m.Guest.KernelVersion + "/kernel/drivers/char/virtio_console.ko",
		"lib/modules/" + m.Guest.KernelVersion + "/kernel/fs/ext4/ext4.ko",
		"lib/modules/" + m.Guest.KernelVersion + "/kernel/fs/jbd2/jbd2.ko"} {
		if !slices.Contains(names, want) {
			t.Errorf("Got(initramfs) without %s; want it", want)
		}
	}

	tpl, ok := m.Template(TemplateBusybox)
	if !ok {
		t.Fatalf("Got(Templates) = %+v; want busybox", m.Templates)
	}
	if tpl.Format != FormatExt4 || tpl.SizeBytes <= 0 {
		t.Errorf("Got(busybox template) = %+v; want ext4 with a size", tpl)
	}
	out, err = exec.Command("debugfs", "-R", "stat /workspace", tpl.Path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "User:  1000") {
		t.Errorf("Got(debugfs stat /workspace) = %s, %v; want owned by uid 1000", out, err)
	}
	out, err = exec.Command("debugfs", "-R", "cat /etc/passwd", tpl.Path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sandbox:x:1000:1000:") {
		t.Errorf("Got(template /etc/passwd) = %s, %v; want the sandbox user", out, err)
	}
	// What the guest agent recognises a template disk by.
	out, err = exec.Command("debugfs", "-R", "cat /"+templateMarker, tpl.Path).CombinedOutput()
	if want := `{"name":"busybox","version":"` + tpl.Version + `"}`; err != nil || !strings.Contains(string(out), want) {
		t.Errorf("Got(template marker) = %s, %v; want %s", out, err, want)
	}
	out, err = exec.Command("e2label", tpl.Path).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "stockade-busybox" {
		t.Errorf("Got(e2label) = %q, %v; want stockade-busybox", out, err)
	}

	loaded, err := Load(testDataDir())
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if loaded.Guest != m.Guest || len(loaded.Checksums) != len(m.Checksums) {
		t.Errorf("Got(Load()) = %+v; want %+v", loaded.Guest, m.Guest)
	}
	if err := Verify(loaded); err != nil {
		t.Errorf("Verify() = %v", err)
	}

	t.Run("warm build reuses everything", func(t *testing.T) {
		before, _ := stamp(m.Guest.Initramfs)
		again, progress := buildTestImage(t, agent)
		if again.Guest != m.Guest {
			t.Errorf("Got(second Build().Guest) = %+v; want %+v", again.Guest, m.Guest)
		}
		for _, want := range []string{"downloading packages ... cached", "reused " + m.Guest.Version, "reused " + tpl.Version} {
			if !strings.Contains(progress, want) {
				t.Errorf("Got(progress) = %s; want %q", progress, want)
			}
		}
		if after, _ := stamp(m.Guest.Initramfs); after.Size != before.Size || !after.ModTime.Equal(before.ModTime) {
			t.Errorf("Got(initramfs stamp after warm build) = %+v; want unchanged %+v", after, before)
		}
	})

	t.Run("new agent makes a new version", func(t *testing.T) {
		other := buildAgent(t, t.TempDir(), "test-build-other")
		m2, _ := buildTestImage(t, other)
		if m2.Guest.Version == m.Guest.Version {
			t.Errorf("Got(version with another agent) = %s; want a new one", m2.Guest.Version)
		}
		if _, err := os.Stat(m.Guest.Initramfs); err != nil {
			t.Errorf("Got(old version after a new build) = %v; want it left alone", err)
		}
		if t2, _ := m2.Template(TemplateBusybox); t2.Version != tpl.Version {
			t.Errorf("Got(busybox template version) = %s; want unchanged %s", t2.Version, tpl.Version)
		}
	})

	t.Run("unknown template", func(t *testing.T) {
		_, err := Build(context.Background(), Options{DataDir: t.TempDir(), AgentBinary: agent, Templates: []string{"alpine"}})
		if !errors.Is(err, ErrUnknownTemplate) {
			t.Errorf("Got(Build(alpine)) = %v; want ErrUnknownTemplate", err)
		}
	})

	t.Run("dynamic agent refused", func(t *testing.T) {
		_, err := Build(context.Background(), Options{DataDir: t.TempDir(), AgentBinary: "/bin/sh"})
		if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
			t.Errorf("Got(Build(agent /bin/sh)) = %v; want a dynamically linked error", err)
		}
	})
}
