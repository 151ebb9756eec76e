package image

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// cpA copies a folder as an operator would: cp -a keeps times, so the
// manifest's stamps still hold.
func cpA(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", "--sparse=always", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v: %s", from, to, err, out)
	}
}

// TestLoadCopiedDataDir: a data dir copied elsewhere, the original gone,
// still loads, whether its manifest is relative (what Build writes) or
// absolute (what older builds wrote: migrated on load). A path outside the
// data dir stays as it was.
func TestLoadCopiedDataDir(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "elsewhere.ext4")
	if err := os.WriteFile(outside, []byte("imported template"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		absolute bool
	}{{"relative manifest", false}, {"absolute manifest of an older build", true}} {
		t.Run(tc.name, func(t *testing.T) {
			orig := filepath.Join(base, strings.ReplaceAll(tc.name, " ", "-"))
			files := map[string]string{
				"images/guest-abc/vmlinux":               "kernel",
				"images/guest-abc/initramfs.cpio":        "initramfs",
				"images/templates/busybox-123.ext4":      "busybox template",
				"images/templates/images/odd-name.ext4":  "a template in a folder called images",
				"images/templates/busybox-123.ext4.json": "{}",
			}
			m := Manifest{Guest: Guest{Version: "abc", Kernel: filepath.Join(orig, "images/guest-abc/vmlinux"),
				Initramfs: filepath.Join(orig, "images/guest-abc/initramfs.cpio"), Cmdline: Cmdline},
				Checksums: map[string]string{}, Files: map[string]FileStamp{}}
			for rel, content := range files {
				p := filepath.Join(orig, rel)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				if strings.HasSuffix(rel, ".json") {
					continue
				}
				m.Checksums[p] = bytesSHA256([]byte(content))
				m.Files[p], _ = stamp(p)
			}
			m.Checksums[outside] = bytesSHA256([]byte("imported template"))
			m.Files[outside], _ = stamp(outside)
			m.Templates = []Template{
				{Name: "busybox", Version: "123", Path: filepath.Join(orig, "images/templates/busybox-123.ext4"), Format: FormatExt4},
				{Name: "odd", Version: "1", Path: filepath.Join(orig, "images/templates/images/odd-name.ext4"), Format: FormatExt4},
				{Name: "imported", Version: "1", Path: outside, Format: FormatExt4},
			}
			onDisk := m.onDisk(orig)
			if tc.absolute {
				onDisk = m
			}
			if err := writeJSON(manifestPath(orig), onDisk); err != nil {
				t.Fatal(err)
			}

			moved := orig + "-copy"
			cpA(t, orig, moved)
			if err := os.Rename(orig, orig+"-gone"); err != nil {
				t.Fatal(err)
			}
			got, err := Load(moved)
			if err != nil {
				t.Fatalf("Load(copy) = %v; want the copy's image", err)
			}
			want := map[string]string{
				"kernel":    filepath.Join(moved, "images/guest-abc/vmlinux"),
				"initramfs": filepath.Join(moved, "images/guest-abc/initramfs.cpio"),
				"busybox":   filepath.Join(moved, "images/templates/busybox-123.ext4"),
				"odd":       filepath.Join(moved, "images/templates/images/odd-name.ext4"),
				"imported":  outside,
			}
			paths := map[string]string{"kernel": got.Guest.Kernel, "initramfs": got.Guest.Initramfs}
			for _, tpl := range got.Templates {
				paths[tpl.Name] = tpl.Path
			}
			for k, w := range want {
				if paths[k] != w {
					t.Errorf("Got(%s path) = %s; want %s", k, paths[k], w)
				}
				if _, ok := got.Checksums[w]; !ok {
					t.Errorf("Got(Checksums) = %v; want %s listed", got.Checksums, w)
				}
			}
			if err := Verify(got); err != nil {
				t.Errorf("Verify(copy) = %v; want the copy's files intact", err)
			}
			// Load leaves the manifest as it was.
			if b, err := os.ReadFile(manifestPath(moved)); err != nil || strings.Contains(string(b), orig+"/") != tc.absolute {
				t.Errorf("Got(manifest on disk) = %s, %v; want it untouched by Load", b, err)
			}
			if again, err := Load(moved); err != nil || again.Guest.Kernel != want["kernel"] {
				t.Errorf("Got(Load(copy) again) = %s, %v; want %s", again.Guest.Kernel, err, want["kernel"])
			}
		})
	}
}

// TestCopiedDataDirBoots: the built image copied to another folder (the
// original renamed away) boots a VM and lists its templates from the copy.
func TestCopiedDataDirBoots(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM (seconds under TCG)")
	}
	needBuildTools(t)
	needLibvirt(t)
	agent := buildAgent(t, t.TempDir(), "test-copied")
	m, _ := buildTestImage(t, agent)
	// What Build writes names no path of its data dir.
	b, err := os.ReadFile(manifestPath(testDataDir()))
	if err != nil {
		t.Fatal(err)
	}
	if abs, _ := filepath.Abs(testDataDir()); strings.Contains(string(b), abs) {
		t.Errorf("Got(manifest written by Build) names %s; want paths relative to the data dir:\n%s", abs, b)
	}

	dir, err := os.MkdirTemp("/var/tmp", "stockade-copied-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	orig, moved := filepath.Join(dir, "data"), filepath.Join(dir, "moved")
	if err := os.Mkdir(orig, 0o755); err != nil {
		t.Fatal(err)
	}
	cpA(t, imagesDir(testDataDir()), orig)
	cpA(t, orig, moved)
	if err := os.Rename(orig, orig+"-gone"); err != nil {
		t.Fatal(err)
	}
	got, err := Load(moved)
	if err != nil {
		t.Fatalf("Load(copy) = %v", err)
	}
	tpl, ok := got.Template(TemplateBusybox)
	if !ok || !strings.HasPrefix(tpl.Path, moved+"/") || !strings.HasPrefix(got.Guest.Kernel, moved+"/") || got.Guest.Version != m.Guest.Version {
		t.Fatalf("Got(Load(copy)) = kernel %s, busybox %+v; want both under %s", got.Guest.Kernel, tpl, moved)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := "stockade-imagetest-copied-" + filepath.Base(dir)[len("stockade-copied-"):]
	sock, console := filepath.Join(dir, "agent.sock"), filepath.Join(dir, "console.log")
	xml, err := bootDomain(name, got.Guest, sock, console, 512, tpl.Path)
	if err != nil {
		t.Fatal(err)
	}
	xmlPath := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(xmlPath, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := virsh(ctx, "create", xmlPath); err != nil {
		t.Fatalf("virsh create = %v: %s", err, out)
	}
	defer func() {
		virsh(context.Background(), "destroy", name)
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("guest console:\n%s", b)
		}
	}()
	var conn net.Conn
	for conn == nil {
		if conn, err = net.Dial("unix", sock); err != nil {
			conn = nil
			if ctx.Err() != nil {
				t.Fatalf("agent socket %s: %v", sock, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c, err := agentproto.Dial(ctx, conn, agentproto.ClientOptions{Name: "copied-test"})
	if err != nil {
		t.Fatalf("Dial() = %v", err)
	}
	defer c.Close()
	if h := c.Hello(); h.Agent != "test-copied" || h.Kernel != got.Guest.KernelVersion {
		t.Errorf("Got(Hello()) = agent %q kernel %q; want test-copied on %s", h.Agent, h.Kernel, got.Guest.KernelVersion)
	}
	// The template disk from the copy is there for sandboxes.
	for deadline := time.Now().Add(60 * time.Second); ; {
		list, err := c.ListSandboxes(ctx)
		if err != nil {
			t.Fatalf("ListSandboxes() = %v", err)
		}
		if len(list.Templates) == 1 && list.Templates[0].Name == TemplateBusybox && list.Templates[0].Version == tpl.Version {
			break
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(list.Templates)
			t.Fatalf("Got(ListSandboxes().Templates) = %s; want busybox %s from the copy", b, tpl.Version)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
