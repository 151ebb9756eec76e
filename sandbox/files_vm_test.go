package sandbox_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	wire "github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/web/webtest"
)

// fileSandbox makes a busybox sandbox of tenant A (destroyed at cleanup)
// and returns the developer's client, the sandbox and its files URL prefix.
func fileSandbox(t *testing.T) (*webtest.Client, wire.Sandbox, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots VMs")
	}
	e := need(t)
	api := e.api(e.tokADev)
	sb := create(t, api, map[string]any{"template": "busybox", "memory_mib": 128, "timeout_seconds": 600})
	t.Cleanup(func() { destroy(t, api, sb.ID) })
	return api, sb, "/api/v1/sandboxes/" + sb.ID + "/files?path="
}

// TestFilesAsSandboxUser: the files API has the sandbox user's rights in
// the sandbox, exactly as a command there (item 9 of the hardening issue:
// it used to act as root, reading /etc/shadow, also through a link made
// inside, and writing into root's folders).
func TestFilesAsSandboxUser(t *testing.T) {
	api, sb, files := fileSandbox(t)

	// What a command of the sandbox meets, for comparison.
	r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c",
		"ln -s /etc/shadow /workspace/s; ln -s / /workspace/root; cat /etc/shadow >/dev/null 2>&1 && echo read; (: >/etc/planted) 2>/dev/null && echo wrote; echo done"}})
	if r.Stdout != "done\n" {
		t.Fatalf("Got(a command reading /etc/shadow, writing /etc) = %q; want neither (the template's premise)", r.Stdout)
	}

	refused := []struct {
		name, method, path string
		want               int
	}{
		{"read /etc/shadow", http.MethodGet, "/etc/shadow", http.StatusForbidden},
		{"read /etc/shadow through a link made inside", http.MethodGet, "/workspace/s", http.StatusForbidden},
		{"read /etc/shadow through a link to /", http.MethodGet, "root/etc/shadow", http.StatusForbidden},
		{"write into /etc", http.MethodPut, "/etc/planted", http.StatusForbidden},
		{"write into /", http.MethodPut, "/planted", http.StatusForbidden},
		{"write through a link to /", http.MethodPut, "root/bin/planted", http.StatusForbidden},
		{"replace /etc/passwd", http.MethodPut, "/etc/passwd", http.StatusForbidden},
		{"make a folder in /etc", http.MethodPut, "/etc/newdir/f", http.StatusForbidden},
		{"a kernel interface", http.MethodGet, "/proc/self/status", http.StatusUnprocessableEntity},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			var body any
			if tt.method == http.MethodPut {
				body = []byte("planted by the files API\n")
			}
			status, got, hdr := call(t, api, tt.method, files+url.QueryEscape(tt.path), body)
			if status != tt.want {
				t.Fatalf("Got(%s %s) = %d %.200q; want %d", tt.method, tt.path, status, got, tt.want)
			}
			if pr := decodeProblem(t, hdr, got); pr.Status != tt.want || strings.Contains(got, "$") {
				t.Errorf("Got(problem) = %+v; want status %d and nothing of the file", pr, tt.want)
			}
		})
	}
	r = execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c",
		"ls -d /etc/planted /planted /bin/planted /etc/newdir 2>/dev/null; grep -c planted /etc/passwd"}})
	if r.Stdout != "0\n" {
		t.Errorf("Got(planted files after the refusals) = %q; want none, /etc/passwd untouched", r.Stdout)
	}

	t.Run("the sandbox user's own places", func(t *testing.T) {
		for _, p := range []string{"/workspace/a/b.txt", "notes.txt", "/home/sandbox/.config/x.conf", "/tmp/t.txt"} {
			if s, body, _ := call(t, api, http.MethodPut, files+url.QueryEscape(p)+"&mode=0640", []byte("content of "+p)); s != http.StatusOK {
				t.Errorf("PUT %s = %d %s; want 200", p, s, body)
				continue
			}
			if s, got, _ := call(t, api, http.MethodGet, files+url.QueryEscape(p), nil); s != http.StatusOK || got != "content of "+p {
				t.Errorf("GET %s = %d %q; want what was written", p, s, got)
			}
		}
		r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c",
			"stat -c '%n %u:%g %a' /workspace/a /workspace/a/b.txt /workspace/notes.txt /home/sandbox/.config /home/sandbox/.config/x.conf /tmp/t.txt"}})
		want := "/workspace/a 1000:1000 755\n/workspace/a/b.txt 1000:1000 640\n/workspace/notes.txt 1000:1000 640\n" +
			"/home/sandbox/.config 1000:1000 755\n/home/sandbox/.config/x.conf 1000:1000 640\n/tmp/t.txt 1000:1000 640\n"
		if r.Stdout != want {
			t.Errorf("Got(owners of what the API made) = %q; want %q", r.Stdout, want)
		}
		// A file the sandbox user may read but not write.
		if s, got, _ := call(t, api, http.MethodGet, files+url.QueryEscape("/etc/passwd"), nil); s != http.StatusOK || !strings.Contains(got, "sandbox:x:1000") {
			t.Errorf("GET /etc/passwd = %d %q; want it read (world-readable)", s, got)
		}
	})
}

// TestFileSizeLimit: a file over the per-file limit, read or written, is a
// 413 problem that names the limit and the setting it comes from.
func TestFileSizeLimit(t *testing.T) {
	api, sb, files := fileSandbox(t)
	if r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero > big.bin && echo ok", testFileLimit+1)}}); r.Stdout != "ok\n" {
		t.Fatalf("Got(make big.bin) = %+v", r)
	}
	check := func(t *testing.T, status int, body string, hdr http.Header) {
		t.Helper()
		if status != http.StatusRequestEntityTooLarge {
			t.Fatalf("Got(status) = %d %s; want 413", status, body)
		}
		p := decodeProblem(t, hdr, body)
		if p.field() != sandbox.SettingMaxFileBytes || !strings.Contains(p.Detail, "the limit of 1 MiB (1048576 bytes), set by STOCKADE_MAX_FILE_BYTES") {
			t.Errorf("Got(problem) = %+v; want it to name the limit of 1 MiB and STOCKADE_MAX_FILE_BYTES", p)
		}
	}
	t.Run("upload", func(t *testing.T) {
		status, body, hdr := call(t, api, http.MethodPut, files+"over.bin", make([]byte, testFileLimit+1))
		check(t, status, body, hdr)
	})
	t.Run("upload without a length", func(t *testing.T) {
		pr, pw := io.Pipe()
		go func() { pw.Write(make([]byte, testFileLimit+4096)); pw.Close() }()
		status, body, hdr := api.Request(t, http.MethodPut, "/api/v1/sandboxes/"+sb.ID+"/files?path=over.bin", "application/octet-stream", pr)
		check(t, status, body, hdr)
	})
	t.Run("download", func(t *testing.T) {
		status, body, hdr := call(t, api, http.MethodGet, files+"big.bin", nil)
		check(t, status, body, hdr)
	})
	if s, _, _ := call(t, api, http.MethodGet, files+"over.bin", nil); s != http.StatusNotFound {
		t.Errorf("Got(GET over.bin after the refused uploads) = %d; want 404: nothing written", s)
	}
	if s, body, _ := call(t, api, http.MethodPut, files+"at-the-limit.bin", make([]byte, testFileLimit)); s != http.StatusOK {
		t.Errorf("Got(PUT of exactly the limit) = %d %s; want 200", s, body)
	}
}

// TestBusyboxWget: the busybox template's wget works (the resilience issue
// saw it segfault; it does not here): fetching from a server inside the
// sandbox directly (-Y off: busybox wget ignores no_proxy), asking the
// egress proxy (which refuses loopback, and wget says so), and on a
// terminal, where it draws its progress bar.
func TestBusyboxWget(t *testing.T) {
	api, sb, _ := fileSandbox(t)
	e := need(t)
	start := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c",
		"mkdir -p /tmp/www && head -c 70000 /dev/zero | tr '\\0' x > /tmp/www/x && httpd -p 127.0.0.1:8000 -h /tmp/www && echo up"}})
	if start.Stdout != "up\n" {
		t.Fatalf("Got(httpd in the sandbox) = %+v; want it up", start)
	}
	tests := []struct {
		name, line string
		code       int
		out        string
	}{
		{"direct", "wget -Y off -q -O - http://127.0.0.1:8000/x | wc -c", 0, "70000\n"},
		{"to a file", "cd /tmp && wget -Y off http://127.0.0.1:8000/x -O got >/dev/null 2>&1; wc -c < got", 0, "70000\n"},
		{"through the proxy", "wget -q -O - http://127.0.0.1:8000/x 2>&1; echo exit $?", 0, "wget: server returned error: HTTP/1.1 "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", tt.line}})
			if r.ExitCode != tt.code || !strings.HasPrefix(r.Stdout, tt.out) || strings.Contains(r.Stdout+r.Stderr, "egmentation") {
				t.Errorf("Got(%s) = exit %d %q %q; want exit %d and %q", tt.line, r.ExitCode, r.Stdout, r.Stderr, tt.code, tt.out)
			}
		})
	}
	t.Run("on a terminal", func(t *testing.T) {
		var out strings.Builder
		st, err := e.agent(t).Exec(ctx, agentproto.ExecRequest{Sandbox: sb.ID, TTY: true, Size: agentproto.Winsize{Rows: 24, Cols: 80},
			Argv: []string{"sh", "-c", "wget -Y off -O /tmp/tty http://127.0.0.1:8000/x; echo exit $?"}}, strings.NewReader(""), &out, &out)
		if err != nil || st.Code != 0 || !strings.Contains(out.String(), "100%") || !strings.Contains(out.String(), "exit 0") {
			t.Errorf("Got(wget on a terminal) = %+v, %v, %q; want its progress to 100%% and exit 0", st, err, out.String())
		}
	})
}
