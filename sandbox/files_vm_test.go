package sandbox_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestFilesAsSandboxUser: the files API has the sandbox user's rights in
// the sandbox, exactly as a command there (item 9 of the hardening issue:
// it used to act as root, reading /etc/shadow, also through a link made
// inside, and writing into root's folders).
func TestFilesAsSandboxUser(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs")
	}
	e := need(t)
	api := e.api(e.tokADev)
	sb := create(t, api, map[string]any{"template": "busybox", "memory_mib": 128, "timeout_seconds": 600})
	defer destroy(t, api, sb.ID)
	files := "/api/v1/sandboxes/" + sb.ID + "/files?path="

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
