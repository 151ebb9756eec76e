package web_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// wsEcho is a WebSocket echo server in Python's standard library (debian's
// python3 has no websockets module): the handshake, then each text or
// binary frame from the client sent back unmasked; a close frame ends it.
const wsEcho = `import base64, hashlib, socket, struct, threading
G = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def recvn(c, n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b
def serve(c):
    try:
        req = b""
        while b"\r\n\r\n" not in req:
            x = c.recv(4096)
            if not x:
                return
            req += x
        key = ""
        for line in req.decode().split("\r\n"):
            if line.lower().startswith("sec-websocket-key:"):
                key = line.split(":", 1)[1].strip()
        acc = base64.b64encode(hashlib.sha1(key.encode() + G).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + "\r\n\r\n").encode())
        while True:
            h = recvn(c, 2)
            op, n = h[0] & 15, h[1] & 127
            if n == 126:
                n = struct.unpack(">H", recvn(c, 2))[0]
            elif n == 127:
                n = struct.unpack(">Q", recvn(c, 8))[0]
            mask = recvn(c, 4) if h[1] & 128 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(recvn(c, n)))
            if op == 8:
                c.sendall(b"\x88\x00")
                return
            hdr = bytes([h[0] & 128 | op])
            if len(data) < 126:
                hdr += bytes([len(data)])
            else:
                hdr += bytes([126]) + struct.pack(">H", len(data))
            c.sendall(hdr + data)
    except EOFError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8765))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// hdrEcho answers every GET with the request line and headers it got, and
// tries to set a cookie.
const hdrEcho = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = (self.requestline + "\n" + str(self.headers)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Set-Cookie", "stockade_session=guest-set; Path=/")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
http.server.HTTPServer(("127.0.0.1", 8001), H).serve_forever()
`

// TestPortsVM: on a real VM, a dev server (python3 -m http.server in the
// debian template) is reached through the port route with the tenant's
// token and through a preview link without one; the link stops working
// when revoked, and when expired; another tenant gets 404 for the port and
// the links; a WebSocket echo works through the port route and a preview
// link; bad ports, an unknown sandbox, a port nothing listens on and an
// ended sandbox are clear errors; the sandbox never sees the caller's
// token; no tunnel is left open.
func TestPortsVM(t *testing.T) {
	dataDir := sandboxtest.NeedVMs(t, "debian")
	ctx := context.Background()
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vms, sbx := sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{SyncInterval: time.Second, SampleInterval: 2 * time.Second, DefaultTemplate: "debian"})
	env := webtest.New(t, webtest.Options{DB: db, VMs: vms, Sandboxes: sbx})
	a := env.TenantNamed(t, "ports-a", "Ports A")
	b := env.TenantNamed(t, "ports-b", "Ports B")
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	if _, err := vms.SetPool(ctx, sys, a.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	aSecret, _ := env.NewToken(t, a, "a-ci", tenants.RoleDeveloper)
	bSecret, _ := env.NewToken(t, b, "b-ci", tenants.RoleAdmin)
	ac, bc, anon := env.WithToken(aSecret), env.WithToken(bSecret), env.Anonymous()

	// Created through the service: a VM boot under TCG can outlast the
	// test client's 30 s.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	sb, err := sbx.Create(cctx, sys, a.ID, sandbox.Spec{Template: "debian", MemoryMiB: 256})
	cancel()
	if err != nil {
		t.Fatalf("create the sandbox: %v", err)
	}
	base := "/api/v1/sandboxes/" + sb.ID
	put := func(path, text string) {
		t.Helper()
		if s, body, _ := ac.Request(t, http.MethodPut, base+"/files?path="+path, "application/octet-stream", strings.NewReader(text)); s != http.StatusOK {
			t.Fatalf("Got(write %s) = %d; want 200: %s", path, s, body)
		}
	}
	const marker = "served from inside the sandbox"
	put("/workspace/site/index.html", "<h1>"+marker+"</h1>\n")
	put("/workspace/site/sub/listed.txt", "a file\n")
	put("/workspace/ws.py", wsEcho)
	put("/workspace/hdr.py", hdrEcho)
	// The servers outlive the exec: setsid and nohup, output to files.
	start := `cd /workspace/site && setsid nohup python3 -m http.server 8000 --bind 127.0.0.1 >/tmp/http.log 2>&1 < /dev/null &
setsid nohup python3 /workspace/ws.py >/tmp/ws.log 2>&1 < /dev/null &
setsid nohup python3 /workspace/hdr.py >/tmp/hdr.log 2>&1 < /dev/null &
for i in $(seq 1 200); do
  python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8000)).close(); socket.create_connection(("127.0.0.1", 8765)).close(); socket.create_connection(("127.0.0.1", 8001)).close()' 2>/dev/null && exit 0
  sleep 0.2
done
cat /tmp/http.log /tmp/ws.log; exit 1`
	var out strings.Builder
	xctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	res, err := sbx.Exec(xctx, sys, a.ID, sb.ID, sandbox.ExecRequest{Cmd: []string{"sh", "-c", start}, TimeoutSeconds: 240}, &out, &out)
	cancel()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Got(start the servers) = %+v, %v; want exit 0: %s", res, err, out.String())
	}

	t.Run("port route", func(t *testing.T) {
		s, body, hdr := ac.Request(t, http.MethodGet, base+"/ports/8000/index.html", "", nil)
		if s != http.StatusOK || !strings.Contains(body, marker) {
			t.Fatalf("Got(GET through the port) = %d %q; want 200 with %q", s, body, marker)
		}
		if got := hdr.Get("Content-Security-Policy"); !strings.HasPrefix(got, "sandbox") {
			t.Errorf("Got(Content-Security-Policy) = %q; want the sandboxing policy", got)
		}
		// A directory listing: the path below the port reaches the server.
		if s, body, _ := ac.Request(t, http.MethodGet, base+"/ports/8000/sub/?x=1", "", nil); s != http.StatusOK || !strings.Contains(body, "listed.txt") {
			t.Errorf("Got(GET /sub/) = %d %.200q; want 200 listing listed.txt", s, body)
		}
		var u api.PortURL
		if s, body := ac.JSON(t, http.MethodGet, base+"/ports/8000", nil, &u); s != http.StatusOK || !strings.HasSuffix(u.URL, base+"/ports/8000/") {
			t.Errorf("Got(port URL) = %d %+v; want 200 ending in %s/ports/8000/: %s", s, u, base, body)
		}
	})

	t.Run("another tenant", func(t *testing.T) {
		for _, path := range []string{base + "/ports/8000/index.html", base + "/ports/8000", base + "/previews"} {
			s, body, hdr := bc.Request(t, http.MethodGet, path, "", nil)
			if s != http.StatusNotFound {
				t.Errorf("Got(B's GET %s) = %d; want 404: %.200s", path, s, body)
			} else if p := webtest.Problem(t, hdr, body); p.Status != http.StatusNotFound {
				t.Errorf("Got(problem status) = %d; want 404", p.Status)
			}
			if strings.Contains(body, marker) {
				t.Errorf("Got(B's body) contains the sandbox's page")
			}
		}
		if s, body := bc.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 8000}, nil); s != http.StatusNotFound {
			t.Errorf("Got(B creates a link) = %d; want 404: %s", s, body)
		}
		if s, _, _ := anon.Request(t, http.MethodGet, base+"/ports/8000/index.html", "", nil); s != http.StatusUnauthorized {
			t.Errorf("Got(anonymous GET) = %d; want 401", s)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			path   string
			status int
			field  string
		}{
			{base + "/ports/0/", http.StatusUnprocessableEntity, "port"},
			{base + "/ports/70000/", http.StatusUnprocessableEntity, "port"},
			{base + "/ports/http/", http.StatusUnprocessableEntity, "port"},
			{"/api/v1/sandboxes/00000000-0000-7000-8000-000000000000/ports/8000/", http.StatusNotFound, ""},
			{base + "/ports/9/", http.StatusNotFound, ""}, // nothing listens there
		} {
			s, body, hdr := ac.Request(t, http.MethodGet, c.path, "", nil)
			if s != c.status {
				t.Errorf("Got(GET %s) = %d; want %d: %.300s", c.path, s, c.status, body)
				continue
			}
			p := webtest.Problem(t, hdr, body)
			if c.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != c.field) {
				t.Errorf("Got(problem of %s) = %+v; want one naming %q", c.path, p, c.field)
			}
		}
		if s, body := ac.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 70000}, nil); s != http.StatusUnprocessableEntity || !strings.Contains(body, `"port"`) {
			t.Errorf("Got(link to port 70000) = %d %s; want 422 naming port", s, body)
		}
		if s, body := ac.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 8000, TTLSeconds: 10}, nil); s != http.StatusUnprocessableEntity || !strings.Contains(body, "ttl_seconds") {
			t.Errorf("Got(link for 10 s) = %d %s; want 422 naming ttl_seconds", s, body)
		}
	})

	t.Run("credentials stay out", func(t *testing.T) {
		// The caller's token, CSRF header and Stockade cookies never reach
		// the sandbox; its own cookies do; the guest's Set-Cookie does not
		// come back on the console's origin.
		s, body, hdr := ac.Request(t, http.MethodGet, base+"/ports/8001/seen?q=1", "", nil,
			"Cookie", "stockade_session=caller-session; __Host-stockade_csrf=caller-csrf; app=kept", "X-CSRF-Token", "caller-csrf-header")
		if s != http.StatusOK || !strings.Contains(body, "GET /seen?q=1 ") {
			t.Fatalf("Got(header echo) = %d %q; want 200 with the request line", s, body)
		}
		for _, leak := range []string{aSecret, "caller-session", "caller-csrf", "caller-csrf-header"} {
			if strings.Contains(body, leak) {
				t.Errorf("Got(what the sandbox saw) contains %q:\n%s", leak, body)
			}
		}
		if !strings.Contains(body, "app=kept") {
			t.Errorf("Got(what the sandbox saw) = %q; want its own cookie app=kept", body)
		}
		if sc := hdr.Values("Set-Cookie"); len(sc) != 0 {
			t.Errorf("Got(Set-Cookie from the guest) = %q; want none on the console's origin", sc)
		}
	})

	var link api.PreviewLink
	t.Run("preview link", func(t *testing.T) {
		if s, body := ac.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 8000, TTLSeconds: 600}, &link); s != http.StatusCreated {
			t.Fatalf("Got(create link) = %d; want 201: %s", s, body)
		}
		path := strings.TrimPrefix(link.URL, env.URL)
		if !strings.HasPrefix(path, "/preview/stkp_") {
			t.Fatalf("Got(link URL) = %q; want %s/preview/stkp_...", link.URL, env.URL)
		}
		s, body, _ := anon.Request(t, http.MethodGet, path+"index.html", "", nil)
		if s != http.StatusOK || !strings.Contains(body, marker) {
			t.Fatalf("Got(GET through the link) = %d %.200q; want 200 with the page", s, body)
		}
		var hl api.PreviewLink
		if s, body := ac.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 8001}, &hl); s != http.StatusCreated {
			t.Fatalf("Got(create link) = %d; want 201: %s", s, body)
		}
		hp := strings.TrimPrefix(hl.URL, env.URL)
		if s, body, _ := anon.Request(t, http.MethodGet, hp+"x", "", nil); s != http.StatusOK || strings.Contains(body, "stkp_") || !strings.Contains(body, "GET /x ") {
			t.Errorf("Got(what the sandbox saw through a link) = %d %q; want GET /x without the token", s, body)
		}
		// Listed without its token; audited without it.
		var list api.PreviewLinkList
		if s, body := ac.JSON(t, http.MethodGet, base+"/previews", nil, &list); s != http.StatusOK || len(list.Links) != 2 || list.Links[0].URL != "" || !list.Links[0].Active {
			t.Errorf("Got(list) = %d %+v; want the one active link without its URL: %s", s, list, body)
		}
		token := strings.TrimSuffix(strings.TrimPrefix(path, "/preview/"), "/")
		evs := env.Events(t, audit.TypeSandboxPreviewCreated)
		if len(evs) != 2 {
			t.Errorf("Got(%s events) = %d; want 2", audit.TypeSandboxPreviewCreated, len(evs))
		}
		for _, e := range evs {
			if d, _ := json.Marshal(e.Details); strings.Contains(string(d), token) {
				t.Errorf("Got(audit details) = %s; want no token", d)
			}
		}
		var stored int64
		db.Table("sandbox_preview_links").Where("token_hash = ?", token).Count(&stored)
		if stored != 0 {
			t.Errorf("Got(rows keeping the token as is) = %d; want 0 (hashed)", stored)
		}

		// Another tenant cannot revoke it.
		if s, body := bc.JSON(t, http.MethodDelete, base+"/previews/"+link.ID, nil, nil); s != http.StatusNotFound {
			t.Errorf("Got(B revokes) = %d; want 404: %s", s, body)
		}
		if s, body := ac.JSON(t, http.MethodDelete, base+"/previews/"+link.ID, nil, nil); s != http.StatusOK {
			t.Fatalf("Got(revoke) = %d; want 200: %s", s, body)
		}
		if s, body, _ := anon.Request(t, http.MethodGet, path+"index.html", "", nil); s != http.StatusNotFound || strings.Contains(body, marker) {
			t.Errorf("Got(GET through the revoked link) = %d %.200q; want 404", s, body)
		}
		if s, _ := ac.JSON(t, http.MethodDelete, base+"/previews/"+link.ID, nil, nil); s != http.StatusConflict {
			t.Errorf("Got(revoke again) = %d; want 409", s)
		}
		if n := len(env.Events(t, audit.TypeSandboxPreviewRevoked)); n != 1 {
			t.Errorf("Got(%s events) = %d; want 1", audit.TypeSandboxPreviewRevoked, n)
		}
		// A link whose time passed (its expiry moved to the past: the
		// service's clock is the VMs' too here) is not found either.
		var exp api.PreviewLink
		if s, body := ac.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 8000, TTLSeconds: 60}, &exp); s != http.StatusCreated {
			t.Fatalf("Got(create link) = %d; want 201: %s", s, body)
		}
		ep := strings.TrimPrefix(exp.URL, env.URL)
		if s, _, _ := anon.Request(t, http.MethodGet, ep, "", nil); s != http.StatusOK {
			t.Errorf("Got(GET through the fresh link) = %d; want 200", s)
		}
		if err := db.Table("sandbox_preview_links").Where("id = ?", exp.ID).Update("expires_at", time.Now().Add(-time.Second).UTC()).Error; err != nil {
			t.Fatal(err)
		}
		if s, _, _ := anon.Request(t, http.MethodGet, ep, "", nil); s != http.StatusNotFound {
			t.Errorf("Got(GET through the expired link) = %d; want 404", s)
		}
	})

	t.Run("websocket", func(t *testing.T) {
		var wsLink api.PreviewLink
		if s, body := ac.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 8765}, &wsLink); s != http.StatusCreated {
			t.Fatalf("Got(create link) = %d; want 201: %s", s, body)
		}
		wsBase := "ws" + strings.TrimPrefix(env.URL, "http")
		for _, c := range []struct {
			name, url string
			hdr       http.Header
		}{
			{"port route", wsBase + base + "/ports/8765/echo", http.Header{"Authorization": {"Bearer " + aSecret}}},
			{"preview link", "ws" + strings.TrimPrefix(wsLink.URL, "http") + "echo", nil},
		} {
			t.Run(c.name, func(t *testing.T) {
				conn, resp, err := websocket.DefaultDialer.Dial(c.url, c.hdr)
				if err != nil {
					status := 0
					if resp != nil {
						status = resp.StatusCode
					}
					t.Fatalf("Got(dial) = %v (status %d); want a WebSocket", err, status)
				}
				defer conn.Close()
				for _, msg := range []string{"hello", strings.Repeat("x", 5000)} {
					if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
						t.Fatal(err)
					}
					conn.SetReadDeadline(time.Now().Add(time.Minute))
					_, got, err := conn.ReadMessage()
					if err != nil || string(got) != msg {
						t.Fatalf("Got(echo) = %.40q, %v; want %.40q", got, err, msg)
					}
				}
			})
		}
		// A page of another site may not open it with ambient credentials.
		_, resp, err := websocket.DefaultDialer.Dial(wsBase+base+"/ports/8765/echo",
			http.Header{"Authorization": {"Bearer " + aSecret}, "Origin": {"https://evil.example"}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("Got(cross-site handshake) = %v; want 403", err)
		}
	})

	t.Run("ended sandbox", func(t *testing.T) {
		var fresh api.PreviewLink
		ac.JSON(t, http.MethodPost, base+"/previews", api.CreatePreviewLink{Port: 8000}, &fresh)
		if s, body := ac.JSON(t, http.MethodDelete, base, nil, nil); s != http.StatusOK {
			t.Fatalf("Got(destroy) = %d; want 200: %s", s, body)
		}
		s, body, hdr := ac.Request(t, http.MethodGet, base+"/ports/8000/", "", nil)
		if s != http.StatusConflict || !strings.Contains(webtest.Problem(t, hdr, body).Detail, "destroyed") {
			t.Errorf("Got(GET a port of an ended sandbox) = %d %.300s; want 409 saying it is destroyed", s, body)
		}
		if s, _, _ := anon.Request(t, http.MethodGet, strings.TrimPrefix(fresh.URL, env.URL), "", nil); s == http.StatusOK {
			t.Errorf("Got(link to an ended sandbox) = %d; want an error", s)
		}
		if n := sbx.OpenTunnels(sb.ID); n != 0 {
			t.Errorf("Got(open tunnels) = %d; want 0", n)
		}
	})
}
