package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
)

// TestSandboxFilesCLI: `stockade sandbox cp` copies folders both ways
// against `stockade serve` on a real VM, and ls, mkdir, mv and rm act on a
// sandbox's files.
func TestSandboxFilesCLI(t *testing.T) {
	shared := sandboxtest.NeedVMs(t)
	dir := leaseDataDir(t, shared)
	vars := map[string]string{"STOCKADE_DATA_DIR": dir, "STOCKADE_DOMAIN_TYPE": "qemu", "STOCKADE_PROBE_INTERVAL": "0", "STOCKADE_ADDR": freeAddr(t)}
	getenv := env(vars)
	if _, _, err := cli(t, getenv, "tenant", "create", "files", "--admin", "ann@files.test"); err != nil {
		t.Fatal(err)
	}
	out, _, err := cli(t, getenv, "token", "create", "--tenant", "files", "--role", "admin")
	if err != nil {
		t.Fatal(err)
	}
	destroyLeftovers(t, "", dir)
	s := startServe(t, getenv)
	vars["STOCKADE_URL"], vars["STOCKADE_TOKEN"] = s.base, strings.TrimSpace(out)
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := cli(t, getenv, append([]string{"sandbox"}, args...)...)
		if err != nil {
			t.Fatalf("Got(stockade sandbox %s) = %v %s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	out = run("create", "--template", "busybox", "--memory", "128", "--timeout", "10m")
	id := strings.TrimSpace(out)
	if id == "" {
		t.Fatalf("Got(sandbox create) = %q; want its id", out)
	}
	var shown struct {
		VMID string `json:"vm_id"`
	}
	if err := json.Unmarshal([]byte(run("show", id)), &shown); err != nil || shown.VMID == "" {
		t.Fatalf("Got(sandbox show) = %v; want its vm_id", err)
	}
	defer func() {
		run("rm", id)
		req, _ := http.NewRequest(http.MethodDelete, s.base+"/api/v1/vms/"+shown.VMID, nil)
		req.Header.Set("Authorization", "Bearer "+vars["STOCKADE_TOKEN"])
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()

	local := t.TempDir()
	src := filepath.Join(local, "src")
	for p, body := range map[string]string{"a.txt": "a\n", "sub/b.txt": "b\n", "sub/deeper/c.bin": strings.Repeat("c", 70000)} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, p), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}

	run("cp", src, id+":/workspace/proj")
	if got := run("exec", id, "--", "sh", "-c", "cd /workspace/proj && cat a.txt sub/b.txt && wc -c < sub/deeper/c.bin && ls -d empty && stat -c %a a.txt"); got != "a\nb\n70000\nempty\n640\n" {
		t.Errorf("Got(the folder copied in) = %q; want its files, its empty folder and modes", got)
	}
	got := run("ls", "--depth", "3", id+":proj")
	for _, want := range []string{"/workspace/proj/a.txt", "/workspace/proj/sub/deeper/c.bin", "-rw-r-----", "sandbox"} {
		if !strings.Contains(got, want) {
			t.Errorf("Got(sandbox ls) = %q; want %q in it", got, want)
		}
	}
	run("mkdir", id+":proj/new/deep")
	run("mv", id+":proj/a.txt", "proj/new/a2.txt")
	run("exec", id, "--", "ln", "-s", "/etc", "/workspace/proj/etc-link")
	run("rm", id+":proj/sub/b.txt")
	if _, _, err := cli(t, getenv, "sandbox", "rm", id+":proj/sub"); err == nil || !strings.Contains(err.Error(), "409") && !strings.Contains(err.Error(), "entries") {
		t.Errorf("Got(rm of a full folder without -r) = %v; want a refusal", err)
	}

	out2 := filepath.Join(local, "out")
	run("cp", id+":/workspace/proj", out2)
	for p, want := range map[string]string{"new/a2.txt": "a\n", "sub/deeper/c.bin": strings.Repeat("c", 70000)} {
		if b, err := os.ReadFile(filepath.Join(out2, p)); err != nil || string(b) != want {
			t.Errorf("Got(%s copied out) = %d bytes, %v; want %d", p, len(b), err, len(want))
		}
	}
	if target, err := os.Readlink(filepath.Join(out2, "etc-link")); err != nil || target != "/etc" {
		t.Errorf("Got(etc-link copied out) = %q, %v; want a link to /etc, not its files", target, err)
	}
	for _, p := range []string{"sub/b.txt", "a.txt"} {
		if _, err := os.Stat(filepath.Join(out2, p)); err == nil {
			t.Errorf("Got(%s copied out) exists; want it gone (removed, moved)", p)
		}
	}
	run("rm", "-r", id+":proj")
	if got := run("exec", id, "--", "sh", "-c", "ls /workspace"); got != "" {
		t.Errorf("Got(/workspace after rm -r) = %q; want empty", got)
	}
}

// TestExtractTarStaysInside: a hostile archive (names that climb, a link
// then a file below it) writes nothing outside the destination.
func TestExtractTarStaysInside(t *testing.T) {
	tests := []struct {
		name    string
		entries []tar.Header
	}{
		{"climbs", []tar.Header{{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"absolute", []tar.Header{{Name: "/tmp/escape", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"through a link", []tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "OUTSIDE"}, {Name: "l/escape", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"over a link", []tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "OUTSIDE/escape"}, {Name: "l", Typeflag: tar.TypeReg, Mode: 0o644}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			outside := filepath.Join(root, "outside")
			dest := filepath.Join(root, "dest")
			for _, d := range []string{outside, dest} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range tc.entries {
				h.Linkname = strings.ReplaceAll(h.Linkname, "OUTSIDE", outside)
				if h.Typeflag == tar.TypeReg {
					h.Size = 1
				}
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
				if h.Typeflag == tar.TypeReg {
					tw.Write([]byte("x"))
				}
			}
			tw.Close()
			extractTar(&buf, dest)
			if m, _ := filepath.Glob(filepath.Join(outside, "*")); len(m) != 0 {
				t.Errorf("Got(files outside the destination) = %v; want none", m)
			}
			if _, err := os.Lstat(filepath.Join(root, "escape")); err == nil {
				t.Error("Got(../escape) exists; want nothing outside the destination")
			}
		})
	}
}
