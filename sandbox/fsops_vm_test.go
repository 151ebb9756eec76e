package sandbox_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/web/webtest"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct{ event, data string }

// openSSE starts a GET of an event stream and returns its events; cancel
// ends the request.
func openSSE(t *testing.T, c *webtest.Client, path string) (<-chan sseEvent, int, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	ch := make(chan sseEvent, 64)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		close(ch)
		t.Logf("GET %s = %d %s", path, resp.StatusCode, b)
		return ch, resp.StatusCode, cancel
	}
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.event != "":
				ch <- ev
				ev = sseEvent{}
			}
		}
	}()
	return ch, resp.StatusCode, cancel
}

// awaitSSE reads events until want says one is it; the stream ending first
// fails the test.
func awaitSSE(t *testing.T, ch <-chan sseEvent, what string, want func(sseEvent) bool) sseEvent {
	t.Helper()
	for ev := range ch {
		if want(ev) {
			return ev
		}
	}
	t.Fatalf("Got(the event stream) ended; want %s", what)
	return sseEvent{}
}

func fsEvent(name, typ string) func(sseEvent) bool {
	return func(ev sseEvent) bool {
		var we api.WatchEvent
		return ev.event == "fs" && json.Unmarshal([]byte(ev.data), &we) == nil && we.Name == name && we.Type == typ
	}
}

// multipartBody is a multipart form with one part per file, named by path.
func multipartBody(t *testing.T, files map[string]string, order []string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range order {
		w, err := mw.CreateFormFile("file", p)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, files[p])
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

// TestFileSystemAPI: the native file API on a real sandbox, through REST:
// uploads, stat, list, mkdir, chmod, move, archive, remove and watch, all
// inside the sandbox's root (links to / and ../.. included), each bad
// input a problem naming its field with nothing changed.
func TestFileSystemAPI(t *testing.T) {
	c, sb, _ := fileSandbox(t)
	base := "/api/v1/sandboxes/" + sb.ID + "/files"
	q := url.QueryEscape
	sh := func(line string) string {
		t.Helper()
		return execIn(t, c, sb.ID, map[string]any{"cmd": []string{"sh", "-c", line}}).Stdout
	}
	refused := func(t *testing.T, what string, status int, body string, hdr http.Header, wantStatus int, wantField string) {
		t.Helper()
		if status != wantStatus {
			t.Fatalf("Got(%s) = %d %.300s; want %d", what, status, body, wantStatus)
		}
		if p := decodeProblem(t, hdr, body); wantField != "" && p.field() != wantField {
			t.Errorf("Got(%s problem field) = %q (%+v); want %q", what, p.field(), p, wantField)
		}
	}

	t.Run("mkdir", func(t *testing.T) {
		s, body, _ := call(t, c, http.MethodPost, base+"/mkdir", map[string]any{"path": "proj/a/b", "mode": "0750"})
		var md api.MadeDir
		if s != http.StatusCreated || json.Unmarshal([]byte(body), &md) != nil || !md.Created || md.Entry.Type != "dir" ||
			md.Entry.Mode != "0750" || md.Entry.Path != "/workspace/proj/a/b" || md.Entry.Owner != "sandbox" {
			t.Errorf("Got(mkdir proj/a/b) = %d %s; want 201, created, a folder 0750 of sandbox", s, body)
		}
		if s, body, _ := call(t, c, http.MethodPost, base+"/mkdir", map[string]any{"path": "proj/a/b"}); s != http.StatusOK || !strings.Contains(body, `"created":false`) {
			t.Errorf("Got(mkdir again) = %d %s; want 200, created false", s, body)
		}
	})

	t.Run("upload", func(t *testing.T) {
		ct, body := multipartBody(t, map[string]string{"proj/x.txt": "x\n", "/workspace/proj/a/y.txt": "yy\n"}, []string{"proj/x.txt", "/workspace/proj/a/y.txt"})
		s, got, _ := c.Request(t, http.MethodPost, base, ct, body)
		var up api.Uploaded
		if s != http.StatusOK || json.Unmarshal([]byte(got), &up) != nil || len(up.Files) != 2 || up.Files[0].Path != "proj/x.txt" || up.Files[1].Size != 3 {
			t.Errorf("Got(multipart upload) = %d %s; want both files", s, got)
		}
		ct, body = multipartBody(t, map[string]string{"z.txt": "z"}, []string{"z.txt"})
		if s, got, _ := c.Request(t, http.MethodPost, base+"?path=proj/a", ct, body); s != http.StatusOK || !strings.Contains(got, `"path":"proj/a/z.txt"`) {
			t.Errorf("Got(multipart upload into ?path=proj/a) = %d %s; want proj/a/z.txt", s, got)
		}
		big := bytes.Repeat([]byte("0123456789abcdef"), 32<<10) // 512 KiB, streamed
		if s, got, _ := c.Request(t, http.MethodPost, base+"?path=proj/big.bin&mode=0600", api.MediaBytes, io.MultiReader(bytes.NewReader(big))); s != http.StatusOK ||
			!strings.Contains(got, `"size":524288`) || !strings.Contains(got, `"mode":"0600"`) {
			t.Errorf("Got(octet-stream upload) = %d %s; want 512 KiB, mode 0600", s, got)
		}
		if got := sh("cat proj/x.txt proj/a/y.txt proj/a/z.txt; wc -c < proj/big.bin"); got != "x\nyy\nz524288\n" {
			t.Errorf("Got(uploaded files in the sandbox) = %q; want their contents", got)
		}
		// A part whose name climbs: refused, nothing of it written.
		ct, body = multipartBody(t, map[string]string{"../../etc/evil": "e"}, []string{"../../etc/evil"})
		s, got, hdr := c.Request(t, http.MethodPost, base+"?path=proj", ct, body)
		refused(t, "upload ../../etc/evil", s, got, hdr, http.StatusUnprocessableEntity, "path")
		ct, body = multipartBody(t, map[string]string{"over.bin": strings.Repeat("o", testFileLimit+1)}, []string{"over.bin"})
		s, got, hdr = c.Request(t, http.MethodPost, base, ct, body)
		refused(t, "upload over the limit", s, got, hdr, http.StatusRequestEntityTooLarge, sandbox.SettingMaxFileBytes)
		s, got, hdr = c.Request(t, http.MethodPost, base+"?path=x", "text/plain", strings.NewReader("x"))
		refused(t, "upload as text/plain", s, got, hdr, http.StatusBadRequest, "Content-Type")
		if got := sh("ls /etc/evil over.bin x 2>/dev/null; echo end"); got != "end\n" {
			t.Errorf("Got(files after refused uploads) = %q; want none", got)
		}
	})

	t.Run("stat", func(t *testing.T) {
		s, body, _ := call(t, c, http.MethodGet, base+"/stat?path=proj/x.txt", nil)
		var e api.FileEntry
		if s != http.StatusOK || json.Unmarshal([]byte(body), &e) != nil {
			t.Fatalf("Got(stat) = %d %s", s, body)
		}
		want := api.FileEntry{Name: "x.txt", Type: "file", Path: "/workspace/proj/x.txt", Size: 2, Mode: "0644", Permissions: "-rw-r--r--",
			UID: 1000, GID: 1000, Owner: "sandbox", Group: "sandbox", ModifiedAt: e.ModifiedAt}
		if e != want || e.ModifiedAt == "" {
			t.Errorf("Got(stat proj/x.txt) = %+v; want %+v", e, want)
		}
		sh("ln -s / root; ln -s ../.. up; ln -s x.txt proj/link")
		s, body, _ = call(t, c, http.MethodGet, base+"/stat?path=root", nil)
		if s != http.StatusOK || !strings.Contains(body, `"type":"symlink"`) || !strings.Contains(body, `"symlink_target":"/"`) {
			t.Errorf("Got(stat of a link to /) = %d %s; want the link itself, target /", s, body)
		}
		s, body, hdr := call(t, c, http.MethodGet, base+"/stat?path="+q("nope"), nil)
		refused(t, "stat of a missing file", s, body, hdr, http.StatusNotFound, "")
		s, body, hdr = call(t, c, http.MethodGet, base+"/stat?path="+q("../etc/passwd"), nil)
		refused(t, "stat with ..", s, body, hdr, http.StatusUnprocessableEntity, "path")
	})

	t.Run("list", func(t *testing.T) {
		list := func(p string, depth int) (int, []string, string) {
			s, body, _ := call(t, c, http.MethodGet, base+"/list?path="+q(p)+"&depth="+string(rune('0'+depth)), nil)
			var l api.FileList
			json.Unmarshal([]byte(body), &l)
			var out []string
			for _, e := range l.Entries {
				out = append(out, e.Path+":"+e.Type)
			}
			return s, out, body
		}
		s, got, body := list("proj", 1)
		want := []string{"/workspace/proj/a:dir", "/workspace/proj/big.bin:file", "/workspace/proj/link:symlink", "/workspace/proj/x.txt:file"}
		if s != http.StatusOK || !slices.Equal(got, want) {
			t.Errorf("Got(list proj) = %d %v; want %v (%s)", s, got, want, body)
		}
		_, got, _ = list("/workspace/proj", 3)
		want = []string{"/workspace/proj/a:dir", "/workspace/proj/a/b:dir", "/workspace/proj/a/y.txt:file", "/workspace/proj/a/z.txt:file",
			"/workspace/proj/big.bin:file", "/workspace/proj/link:symlink", "/workspace/proj/x.txt:file"}
		if !slices.Equal(got, want) {
			t.Errorf("Got(list proj depth 3) = %v; want %v", got, want)
		}
		// Through links to / and ../..: the sandbox's own root.
		for _, p := range []string{"root", "up", "/workspace/up/workspace/root"} {
			s, got, body := list(p, 1)
			if s != http.StatusOK || !slices.Contains(got, "/workspace/"+strings.TrimPrefix(p, "/workspace/")+"/workspace:dir") {
				t.Errorf("Got(list %s) = %d %v; want the sandbox root (its /workspace) (%.200s)", p, s, got, body)
			}
		}
		if got := sh("ls /"); !strings.Contains(got, "workspace") {
			t.Errorf("Got(ls / in the sandbox) = %q", got)
		}
		for _, d := range []string{"0", "17", "x"} {
			s, body, hdr := call(t, c, http.MethodGet, base+"/list?path=proj&depth="+d, nil)
			refused(t, "list depth "+d, s, body, hdr, http.StatusUnprocessableEntity, "depth")
		}
		s, body, hdr := call(t, c, http.MethodGet, base+"/list?path=proj/x.txt", nil)
		refused(t, "list of a file", s, body, hdr, http.StatusUnprocessableEntity, "path")
	})

	t.Run("chmod", func(t *testing.T) {
		if s, body, _ := call(t, c, http.MethodPost, base+"/chmod", map[string]any{"path": "proj/x.txt", "mode": "0600"}); s != http.StatusOK || !strings.Contains(body, `"mode":"0600"`) {
			t.Errorf("Got(chmod 0600) = %d %s", s, body)
		}
		if got := sh("stat -c %a proj/x.txt"); got != "600\n" {
			t.Errorf("Got(mode in the sandbox) = %q; want 600", got)
		}
		s, body, hdr := call(t, c, http.MethodPost, base+"/chmod", map[string]any{"path": "proj/x.txt", "mode": "99"})
		refused(t, "chmod 99", s, body, hdr, http.StatusUnprocessableEntity, "mode")
		// Through the link to /: the sandbox's root, which is root's.
		s, body, hdr = call(t, c, http.MethodPost, base+"/chmod", map[string]any{"path": "root", "mode": "0777"})
		refused(t, "chmod of / through a link", s, body, hdr, http.StatusForbidden, "")
	})

	t.Run("move", func(t *testing.T) {
		s, body, _ := call(t, c, http.MethodPost, base+"/move", map[string]any{"source": "proj/x.txt", "destination": "proj/moved/x2.txt"})
		if s != http.StatusOK || !strings.Contains(body, `"path":"/workspace/proj/moved/x2.txt"`) {
			t.Errorf("Got(move) = %d %s", s, body)
		}
		bad := []struct {
			name, src, dst string
			status         int
			field          string
		}{
			{"source climbs", "../etc/passwd", "p", http.StatusUnprocessableEntity, "source"},
			{"destination climbs", "proj/moved/x2.txt", "../../tmp/x", http.StatusUnprocessableEntity, "destination"},
			{"into itself", "proj", "proj/a/proj", http.StatusUnprocessableEntity, "destination"},
			{"missing source", "nope", "p", http.StatusNotFound, ""},
			{"across file systems", "proj/moved/x2.txt", "/tmp/x2.txt", http.StatusUnprocessableEntity, "destination"},
			// The link resolves in the sandbox: its / is another file system.
			{"out through a link to /", "proj/moved/x2.txt", "root/x2.txt", http.StatusUnprocessableEntity, "destination"},
		}
		for _, tc := range bad {
			s, body, hdr := call(t, c, http.MethodPost, base+"/move", map[string]any{"source": tc.src, "destination": tc.dst})
			refused(t, "move "+tc.name, s, body, hdr, tc.status, tc.field)
		}
		if got := sh("cat proj/moved/x2.txt; ls /tmp/x2.txt /x2.txt p 2>/dev/null; echo end"); got != "x\nend\n" {
			t.Errorf("Got(after refused moves) = %q; want x2.txt where it was, nothing else", got)
		}
		// Through ../.. (the sandbox's root): lands in its /workspace.
		if s, body, _ := call(t, c, http.MethodPost, base+"/move", map[string]any{"source": "proj/moved/x2.txt", "destination": "up/workspace/x3.txt"}); s != http.StatusOK {
			t.Errorf("Got(move through ../..) = %d %s; want 200", s, body)
		}
		if s, body, _ := call(t, c, http.MethodPost, base+"/move", map[string]any{"source": "/workspace/x3.txt", "destination": "proj/moved/x2.txt"}); s != http.StatusOK {
			t.Errorf("Got(move back) = %d %s; want 200", s, body)
		}
	})

	t.Run("archive", func(t *testing.T) {
		s, body, hdr := call(t, c, http.MethodGet, base+"/archive?path=proj", nil)
		if s != http.StatusOK || hdr.Get("Content-Type") != api.MediaTar || !strings.Contains(hdr.Get("Content-Disposition"), `filename=proj.tar`) {
			t.Fatalf("Got(archive) = %d %v; want a tar named proj.tar", s, hdr)
		}
		got := map[string]string{}
		tr := tar.NewReader(strings.NewReader(body))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("Got(read the tar) = %v", err)
			}
			b, _ := io.ReadAll(tr)
			got[h.Name] = string(b)
			if h.Typeflag == tar.TypeSymlink {
				got[h.Name] = "-> " + h.Linkname
			}
		}
		for name, want := range map[string]string{"a/": "", "a/b/": "", "a/y.txt": "yy\n", "a/z.txt": "z", "moved/x2.txt": "x\n", "link": "-> x.txt"} {
			if v, ok := got[name]; !ok || v != want {
				t.Errorf("Got(archive %s) = %q, %v; want %q", name, v, ok, want)
			}
		}
		if len(got["big.bin"]) != 524288 {
			t.Errorf("Got(archive big.bin) = %d bytes; want 524288", len(got["big.bin"]))
		}
		// Through the link to /: the sandbox root's own /etc/passwd.
		s, body, _ = call(t, c, http.MethodGet, base+"/archive?path=root/etc/passwd", nil)
		if s != http.StatusOK || !strings.Contains(body, "sandbox:x:1000") {
			t.Errorf("Got(archive root/etc/passwd) = %d; want the sandbox's passwd", s)
		}
		sh("head -c 1200000 /dev/zero > proj/over.bin")
		req, _ := http.NewRequest(http.MethodGet, c.Base+base+"/archive?path=proj", nil)
		resp, err := c.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Errorf("Got(archive over the 1 MiB limit) = a whole response; want it cut short")
		}
		sh("rm proj/over.bin")
	})

	t.Run("watch", func(t *testing.T) {
		sh("mkdir -p w/sub")
		for _, tc := range []struct {
			path   string
			status int
			field  string
		}{{"proj/big.bin", http.StatusUnprocessableEntity, "path"}, {"nope", http.StatusNotFound, ""}, {"../w", http.StatusUnprocessableEntity, "path"}} {
			s, body, hdr := call(t, c, http.MethodGet, base+"/watch?path="+q(tc.path), nil)
			refused(t, "watch "+tc.path, s, body, hdr, tc.status, tc.field)
		}
		ch, s, cancel := openSSE(t, c, base+"/watch?path=w&recursive=true")
		defer cancel()
		if s != http.StatusOK {
			t.Fatalf("Got(watch w) = %d; want 200", s)
		}
		awaitSSE(t, ch, "start", func(ev sseEvent) bool { return ev.event == "start" })
		sh("echo 1 > w/new; echo 2 > w/sub/deep; mkdir w/later; touch w/later/z; mv w/new w/renamed; rm w/renamed")
		for _, want := range []struct{ name, typ string }{{"new", "create"}, {"sub/deep", "create"}, {"later", "create"},
			{"later/z", "create"}, {"new", "rename"}, {"renamed", "remove"}} {
			awaitSSE(t, ch, want.typ+" "+want.name, fsEvent(want.name, want.typ))
		}
		// Through a link to /: the sandbox's /workspace, not the guest's.
		ch2, s, cancel2 := openSSE(t, c, base+"/watch?path=root/workspace/w")
		defer cancel2()
		if s != http.StatusOK {
			t.Fatalf("Got(watch root/workspace/w) = %d", s)
		}
		awaitSSE(t, ch2, "start", func(ev sseEvent) bool { return ev.event == "start" })
		sh("touch w/via-link")
		awaitSSE(t, ch2, "create via-link", fsEvent("via-link", "create"))
		cancel2()
		// The watched folder going ends the stream with "end".
		sh("rm -r w")
		ev := awaitSSE(t, ch, "end", func(ev sseEvent) bool { return ev.event == "end" })
		if !strings.Contains(ev.data, "removed") {
			t.Errorf("Got(end) = %s; want the folder's removal", ev.data)
		}
	})

	t.Run("remove", func(t *testing.T) {
		s, body, hdr := call(t, c, http.MethodDelete, base+"?path=proj", nil)
		refused(t, "remove a full folder", s, body, hdr, http.StatusConflict, "")
		for _, p := range []string{"/", "/workspace/..", "up/.."} {
			s, body, hdr := call(t, c, http.MethodDelete, base+"?recursive=true&path="+q(p), nil)
			refused(t, "remove "+p, s, body, hdr, http.StatusUnprocessableEntity, "path")
		}
		s, body, hdr = call(t, c, http.MethodDelete, base+"?recursive=true&path=/workspace", nil)
		refused(t, "remove the /workspace mount", s, body, hdr, http.StatusConflict, "")
		s, body, hdr = call(t, c, http.MethodDelete, base+"?recursive=maybe&path=proj", nil)
		refused(t, "remove recursive=maybe", s, body, hdr, http.StatusUnprocessableEntity, "recursive")
		if got := sh("ls proj/a/y.txt"); got != "proj/a/y.txt\n" {
			t.Errorf("Got(proj after refused removes) = %q; want untouched", got)
		}
		// A link goes, not what it points at.
		if s, body, _ := call(t, c, http.MethodDelete, base+"?recursive=true&path=root", nil); s != http.StatusNoContent {
			t.Errorf("Got(remove the link to /) = %d %s; want 204", s, body)
		}
		if s, body, _ := call(t, c, http.MethodDelete, base+"?recursive=true&path=proj", nil); s != http.StatusNoContent {
			t.Errorf("Got(remove proj recursively) = %d %s; want 204", s, body)
		}
		if got := sh("ls -d proj /etc/passwd /workspace 2>&1"); got != "ls: proj: No such file or directory\n/etc/passwd\n/workspace\n" {
			t.Errorf("Got(after removes) = %q; want proj gone, / untouched", got)
		}
	})

	t.Run("another tenant", func(t *testing.T) {
		e := need(t)
		other := e.api(e.tokB)
		for _, r := range []struct{ method, path string }{{http.MethodGet, base + "/stat?path=up"}, {http.MethodGet, base + "/list?path=/"},
			{http.MethodGet, base + "/watch?path=/workspace"}, {http.MethodGet, base + "/archive?path=/workspace"},
			{http.MethodDelete, base + "?path=up"}} {
			s, body, hdr := call(t, other, r.method, r.path, nil)
			refused(t, "B's "+r.method+" "+r.path, s, body, hdr, http.StatusNotFound, "")
		}
		s, body, hdr := call(t, other, http.MethodPost, base+"/mkdir", map[string]any{"path": "from-b"})
		refused(t, "B's mkdir", s, body, hdr, http.StatusNotFound, "")
		if got := sh("ls -d up from-b 2>/dev/null"); got != "up\n" {
			t.Errorf("Got(after B's calls) = %q; want up there, from-b not", got)
		}
	})

	t.Run("audited", func(t *testing.T) {
		e := need(t)
		s, body, _ := call(t, e.api(e.tokA), http.MethodGet, "/api/v1/audit?format=jsonl&limit=1000&q="+sb.ID, nil)
		for _, typ := range []string{audit.TypeSandboxDirMade, audit.TypeSandboxFileMoved, audit.TypeSandboxFileChmod,
			audit.TypeSandboxFileRemoved, audit.TypeSandboxArchiveRead, audit.TypeSandboxFileWritten} {
			if s != http.StatusOK || !strings.Contains(body, `"`+typ+`"`) {
				t.Errorf("Got(audit of the sandbox) = %d, no %s; want it", s, typ)
			}
		}
	})
}

// TestFileSystemService: the sandbox.Service methods the MCP and E2B
// layers call, on a real sandbox; a watch ends when its sandbox does.
func TestFileSystemService(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs")
	}
	e := need(t)
	c := e.api(e.tokADev)
	sb := create(t, c, map[string]any{"template": "busybox", "memory_mib": 128, "timeout_seconds": 600})
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			destroy(t, c, sb.ID)
		}
	})
	svc := e.service()
	actor := audit.Actor{Kind: audit.ActorSystem, Name: "test"}
	tenantID := e.a.ID
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	if _, created, err := svc.MakeDir(ctx, actor, tenantID, sb.ID, "/workspace/d/e", 0); err != nil || !created {
		t.Fatalf("Got(MakeDir()) = %v, %v; want created", created, err)
	}
	if _, err := svc.WriteFile(ctx, actor, tenantID, sb.ID, "d/f.txt", strings.NewReader("f"), 0); err != nil {
		t.Fatal(err)
	}
	en, err := svc.Stat(ctx, tenantID, sb.ID, "d/f.txt")
	if err != nil || en.Type != sandbox.EntryFile || en.Size != 1 || en.Owner != "sandbox" {
		t.Errorf("Got(Stat()) = %+v, %v; want a 1-byte file of sandbox", en, err)
	}
	l, err := svc.ListDir(ctx, tenantID, sb.ID, "d", 2)
	if err != nil || len(l.Entries) != 2 || l.Truncated {
		t.Errorf("Got(ListDir()) = %+v, %v; want e and f.txt", l, err)
	}
	if _, err := svc.ListDir(ctx, tenantID, sb.ID, "d", 0); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Got(ListDir(depth 0)) = %v; want ErrInvalid", err)
	}
	if _, err := svc.Stat(ctx, e.b.ID, sb.ID, "d/f.txt"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Got(Stat() as tenant B) = %v; want ErrNotFound", err)
	}
	if _, err := svc.Move(ctx, actor, tenantID, sb.ID, "d/f.txt", "d/e/g.txt"); err != nil {
		t.Errorf("Got(Move()) = %v", err)
	}
	if _, err := svc.Chmod(ctx, actor, tenantID, sb.ID, "d/e/g.txt", 0o600); err != nil {
		t.Errorf("Got(Chmod()) = %v", err)
	}
	var tb bytes.Buffer
	if n, err := svc.ReadArchive(ctx, actor, tenantID, sb.ID, "d", func(string) (io.Writer, error) { return &tb, nil }); err != nil || n == 0 {
		t.Errorf("Got(ReadArchive()) = %d, %v", n, err)
	}
	if h, err := tar.NewReader(&tb).Next(); err != nil || h.Name != "e/" {
		t.Errorf("Got(first archive entry) = %+v, %v; want e/", h, err)
	}
	if _, err := svc.Watch(ctx, tenantID, sb.ID, "d/e/g.txt", false); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Got(Watch(a file)) = %v; want ErrInvalid", err)
	}
	w, err := svc.Watch(ctx, tenantID, sb.ID, "d", false)
	if err != nil {
		t.Fatalf("Got(Watch()) = %v", err)
	}
	defer w.Close()
	if _, err := svc.WriteFile(ctx, actor, tenantID, sb.ID, "d/h.txt", strings.NewReader("h"), 0); err != nil {
		t.Fatal(err)
	}
	found := false
	for !found {
		evs, err := w.Next()
		if err != nil {
			t.Fatalf("Got(Next()) = %v; want h.txt's events", err)
		}
		for _, ev := range evs {
			// WriteFile renames a new file over the target: it arrives as a create.
			found = found || ev.Name == "h.txt" && ev.Type == agentproto.FsEventCreate
		}
	}
	// Removing the watched folder ends the watch.
	if err := svc.Remove(ctx, actor, tenantID, sb.ID, "d", true); err != nil {
		t.Fatalf("Got(Remove(d, recursive)) = %v", err)
	}
	for {
		if _, err := w.Next(); err != nil {
			if !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Next() after the folder went) = %v; want ErrNotFound", err)
			}
			break
		}
	}
	// A watch ends when its sandbox ends.
	if _, _, err := svc.MakeDir(ctx, actor, tenantID, sb.ID, "w2", 0); err != nil {
		t.Fatal(err)
	}
	w2, err := svc.Watch(ctx, tenantID, sb.ID, "w2", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	destroy(t, c, sb.ID)
	destroyed = true
	for {
		if _, err := w2.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				t.Errorf("Got(Next() after the sandbox ended) = EOF; want an error saying it ended")
			}
			break
		}
	}
}
