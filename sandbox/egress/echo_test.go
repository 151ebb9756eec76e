package egress_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// bodyKey is a secret whose owner lets it go in request bodies and the
// X-Api-Key header (and not in Authorization).
const bodyKey = "bk_RealBodyKey_55e1c0ffee9a7b3d"

// elsewhereKey is a secret scoped to another host, stored upstream.
const elsewhereKey = "ek_ElsewhereKey_0a1b2c3d4e5f6789"

// echoServer is an HTTPS upstream that answers with everything it was
// sent: the request line, every header, the body; in headers too
// (X-Echo-Authorization, Location, a trailer). ?enc=gzip compresses the
// answer, ?enc=br claims an encoding the gateway cannot read, ?chunk=N
// writes it N bytes at a time, flushed (chunked transfer), ?b64=1 answers
// the body base64-encoded (as a contents API does).
type echoServer struct {
	port  string
	roots *x509.CertPool
	// stored is what /stored answers: a value the upstream holds (a gist
	// made earlier, through another host).
	stored string
	// release lets /events send its second event.
	release chan struct{}
	mu      sync.Mutex
	seen    []string // the request as the upstream got it
}

func newEchoServer(t *testing.T, hosts ...string) *echoServer {
	t.Helper()
	tcfg, roots := upstreamTLS(t, hosts...)
	e := &echoServer{roots: roots, release: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, e.port, _ = net.SplitHostPort(ln.Addr().String())
	srv := &http.Server{
		ErrorLog:  log.New(io.Discard, "", 0),
		TLSConfig: tcfg,
		Handler:   http.HandlerFunc(e.serve),
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return e
}

func (e *echoServer) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/stored":
		io.WriteString(w, "stored: "+e.stored+"\n")
		return
	case "/events":
		// A server-sent event stream: the second event only once the
		// sandbox has read the first, so a gateway that buffers hangs.
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"auth\":%q}\n\n", r.Header.Get("Authorization"))
		w.(http.Flusher).Flush()
		select {
		case <-e.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: done\n\n")
		return
	}
	body, _ := io.ReadAll(r.Body)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", r.Method, r.URL.RequestURI())
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(r.Header[k], ", "))
	}
	if user, pass, ok := r.BasicAuth(); ok {
		fmt.Fprintf(&b, "basic user=%s password=%s\n", user, pass)
	}
	b.WriteString("\n")
	b.Write(body)
	e.mu.Lock()
	e.seen = append(e.seen, b.String())
	e.mu.Unlock()
	out := []byte(b.String())
	q := r.URL.Query()
	if q.Get("b64") != "" {
		out = []byte(base64.StdEncoding.EncodeToString(body))
	}
	w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
	w.Header().Set("Location", "/next?key="+r.Header.Get("X-Api-Key"))
	w.Header().Set("Trailer", "X-Echo-Trailer")
	switch q.Get("enc") {
	case "gzip":
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(out)
		zw.Close()
		out = z.Bytes()
		w.Header().Set("Content-Encoding", "gzip")
	case "br":
		w.Header().Set("Content-Encoding", "br")
	}
	n, _ := strconv.Atoi(q.Get("chunk"))
	if n <= 0 {
		n = len(out) + 1
	}
	for len(out) > 0 {
		k := min(n, len(out))
		w.Write(out[:k])
		w.(http.Flusher).Flush()
		out = out[k:]
	}
	w.Header().Set("X-Echo-Trailer", r.Header.Get("Authorization"))
}

func (e *echoServer) last() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) == 0 {
		return ""
	}
	return e.seen[len(e.seen)-1]
}

// TestSecretEcho is the attack: an upstream echoes the request (headers,
// query, path, body) in its headers, body and trailer, plain, gzip,
// chunked, with values straddling chunk boundaries. The sandbox must never
// read a real value, only its placeholder; a placeholder must be swapped
// only where its secret may go; each reflection is counted and audited.
func TestSecretEcho(t *testing.T) {
	ctx := context.Background()
	db := dbtest.SQLite(t)
	actor := audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada"}
	ten, err := tenants.NewStore(db, nil).CreateTenant(ctx, actor, "echo", "Echo")
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(db, testRoot, secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []secrets.NewSecret{
		{Name: "GH_TOKEN", Value: realToken, Hosts: []string{"echo.secure.test"}},
		{Name: "BODY_KEY", Value: bodyKey, Hosts: []string{"echo.secure.test"}, Inject: []string{"body", "header:X-Api-Key"}},
		// Scoped elsewhere: never sent here, still scrubbed from here.
		{Name: "ELSEWHERE", Value: elsewhereKey, Hosts: []string{"store.secure.test"}, Inject: []string{"body"}},
	} {
		if _, err := sec.Create(ctx, actor, ten.ID, ns); err != nil {
			t.Fatal(err)
		}
	}
	up := newEchoServer(t, "echo.secure.test")
	up.stored = elsewhereKey
	logs := &lockedBuffer{}
	auditLog := audit.NewLog(db, nil)
	gw, proxy := startGateway(t, ten.ID, egress.Config{Policies: allowOnly(1, "*.secure.test"), Store: egress.NewStore(db), Swapper: sec,
		UpstreamRoots: up.roots, Audit: auditLog, Logger: slog.New(slog.NewTextHandler(logs, nil)), Resolver: loopback("echo.secure.test")})
	caPEM, err := sec.CAPEM(ctx, ten.ID)
	if err != nil {
		t.Fatal(err)
	}
	roots := tenantRoots(t, caPEM)
	// The sandbox's client: the tenant CA only; compression left to us,
	// so the test sees what the gateway sent.
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}), DisableCompression: true,
		TLSClientConfig: &tls.Config{RootCAs: roots}}}
	gh := sec.Placeholder(ten.ID, "sb-1", "GH_TOKEN")
	bk := sec.Placeholder(ten.ID, "sb-1", "BODY_KEY")
	base := "https://echo.secure.test:" + up.port

	type request struct {
		name    string
		path    string // with the query
		auth    string
		apiKey  string
		body    string
		gzip    bool // ask for gzip
		wantUp  []string
		notUp   []string
		wantOut []string // in what the sandbox reads (headers, body, trailer)
	}
	tests := []request{
		{name: "bearer echoed in body and headers", path: "/echo", auth: "Bearer " + gh,
			wantUp: []string{"Authorization: Bearer " + realToken}, wantOut: []string{"Authorization: Bearer " + gh, "X-Echo-Authorization: Bearer " + gh}},
		{name: "chunked, 7-byte chunks straddle the value", path: "/echo?chunk=7", auth: "Bearer " + gh,
			wantUp: []string{"Authorization: Bearer " + realToken}, wantOut: []string{"Authorization: Bearer " + gh, "X-Echo-Trailer: Bearer " + gh}},
		{name: "chunked, 1-byte chunks", path: "/echo?chunk=1", auth: "Bearer " + gh,
			wantUp: []string{"Authorization: Bearer " + realToken}, wantOut: []string{"Authorization: Bearer " + gh}},
		{name: "gzip", path: "/echo?enc=gzip", auth: "Bearer " + gh, gzip: true,
			wantUp: []string{"Authorization: Bearer " + realToken, "Accept-Encoding: gzip"}, wantOut: []string{"Authorization: Bearer " + gh}},
		{name: "gzip, chunked in 5-byte pieces", path: "/echo?enc=gzip&chunk=5", auth: "Bearer " + gh, gzip: true,
			wantUp: []string{"Authorization: Bearer " + realToken}, wantOut: []string{"Authorization: Bearer " + gh, "X-Echo-Trailer: Bearer " + gh}},
		{name: "basic credentials come back as the sandbox sent them", path: "/echo?chunk=3",
			auth:   "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+gh)),
			wantUp: []string{"basic user=x-access-token password=" + realToken},
			wantOut: []string{"Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+gh)),
				"basic user=x-access-token password=" + gh}},
		// Default scope: the Authorization header only.
		{name: "GH_TOKEN is not swapped into query, path, body or another header", path: "/repos/" + gh + "?token=" + gh, apiKey: gh,
			body: `{"body":"` + gh + `"}`, wantUp: []string{"/repos/" + gh + "?token=" + gh, "X-Api-Key: " + gh, `{"body":"` + gh + `"}`},
			notUp: []string{realToken}},
		// BODY_KEY opted in to the body and X-Api-Key, not Authorization.
		{name: "BODY_KEY goes in the body and X-Api-Key, and comes back as its placeholder", path: "/gists?chunk=4", apiKey: bk,
			auth: "Bearer " + bk, body: `{"files":{"a.txt":{"content":"` + bk + `"}}}`,
			wantUp:  []string{"X-Api-Key: " + bodyKey, `"content":"` + bodyKey + `"`, "Authorization: Bearer " + bk},
			wantOut: []string{"X-Api-Key: " + bk, `"content":"` + bk + `"`, "Location: /next?key=" + bk}},
		{name: "base64 of a stored value is scrubbed", path: "/contents?b64=1", body: "line one\n" + bk + "\n",
			wantUp: []string{bodyKey}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := http.MethodGet
			var body io.Reader
			if tc.body != "" {
				method, body = http.MethodPost, strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(method, base+tc.path, body)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.apiKey != "" {
				req.Header.Set("X-Api-Key", tc.apiKey)
			}
			if tc.gzip {
				req.Header.Set("Accept-Encoding", "gzip")
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("Got(%s %s) error %v; want an answer", method, tc.path, err)
			}
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("Got(read body) error %v", err)
			}
			text := raw
			if resp.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(raw))
				if err != nil {
					t.Fatalf("Got(gzip body) error %v; want gzip", err)
				}
				if text, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			} else if tc.gzip {
				t.Errorf("Got(Content-Encoding) = %q; want gzip kept", resp.Header.Get("Content-Encoding"))
			}
			var sb strings.Builder
			resp.Header.Write(&sb)
			resp.Trailer.Write(&sb)
			sb.Write(raw)
			sb.Write(text)
			seen := sb.String()
			if strings.Contains(seen, realToken) || strings.Contains(seen, bodyKey) || strings.Contains(seen, elsewhereKey) {
				t.Errorf("Got(sandbox read) = %q; want no real value", seen)
			}
			if resp.StatusCode != http.StatusOK {
				t.Errorf("Got(status) = %d; want 200", resp.StatusCode)
			}
			got := string(text)
			if strings.Contains(tc.path, "b64=1") {
				dec, err := base64.StdEncoding.DecodeString(got)
				if err != nil || strings.Contains(string(dec), bodyKey) || !strings.Contains(string(dec), "line one\n") {
					t.Errorf("Got(base64 answer decoded) = %q, %v; want the text without the real value", dec, err)
				}
			}
			all := got + sb.String()
			for _, w := range tc.wantOut {
				if !strings.Contains(all, w) {
					t.Errorf("Got(sandbox read) = %q; want %q in it", all, w)
				}
			}
			upSaw := up.last()
			for _, w := range tc.wantUp {
				if !strings.Contains(upSaw, w) {
					t.Errorf("Got(upstream saw) = %q; want %q in it", upSaw, w)
				}
			}
			for _, w := range tc.notUp {
				if strings.Contains(upSaw, w) {
					t.Errorf("Got(upstream saw) = %q; want no %q in it", upSaw, w)
				}
			}
		})
	}

	t.Run("an encoding the gateway cannot read is refused", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, base+"/echo?enc=br", nil)
		req.Header.Set("Authorization", "Bearer "+gh)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(b), realToken) {
			t.Errorf("Got(br answer) = %d %q; want 502 without the value", resp.StatusCode, b)
		}
	})

	t.Run("a value stored through another host is scrubbed", func(t *testing.T) {
		resp, err := client.Get(base + "/stored")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "stored: " + sec.Placeholder(ten.ID, "sb-1", "ELSEWHERE") + "\n"; string(b) != want {
			t.Errorf("Got(/stored) = %q; want %q", b, want)
		}
	})

	t.Run("an event stream is not held back", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, base+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+gh)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		want := "data: {\"auth\":\"Bearer " + gh + "\"}\n\n"
		first := make([]byte, len(want))
		if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != want {
			t.Fatalf("Got(first event) = %q, %v; want %q before the upstream sends more", first, err, want)
		}
		close(up.release)
		rest, _ := io.ReadAll(resp.Body)
		if string(rest) != "data: done\n\n" {
			t.Errorf("Got(rest of the stream) = %q; want the second event", rest)
		}
	})

	// The plain-proxy form of an https URL (busybox wget) is scrubbed too.
	t.Run("https URL through the plain proxy", func(t *testing.T) {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s/echo?chunk=2 HTTP/1.1\r\nHost: echo.secure.test:%s\r\nAuthorization: Bearer %s\r\n\r\n", base, up.port, gh)
		b, _ := io.ReadAll(c)
		if strings.Contains(string(b), realToken) || !strings.Contains(string(b), "Authorization: Bearer "+gh) {
			t.Errorf("Got(plain proxy answer) = %q; want the placeholder, never the value", b)
		}
		if !strings.Contains(up.last(), "Authorization: Bearer "+realToken) {
			t.Errorf("Got(upstream saw) = %q; want the real token", up.last())
		}
	})

	// Every connection is recorded once it ends: end them, wait for the
	// counts.
	client.CloseIdleConnections()
	deadline := time.Now().Add(60 * time.Second)
	var evs []egress.Event
	var reflected int64
	for {
		evs, err = egress.NewStore(db).Events(ctx, ten.ID, egress.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		reflected = 0
		for _, ev := range evs {
			reflected += ev.SecretsReflected
		}
		// Every connection's event is written when it ends, after its last
		// rewrite: wait for the rows to account for all the live count.
		if (reflected >= int64(len(tests)) && reflected == gw.Reflections("sb-1")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if reflected < int64(len(tests)) {
		t.Errorf("Got(secrets_reflected over %d events) = %d; want at least %d", len(evs), reflected, len(tests))
	}
	if got := gw.Reflections("sb-1"); got != reflected {
		t.Errorf("Got(Reflections(sb-1)) = %d; want %d (the events' sum)", got, reflected)
	}
	aud, err := auditLog.List(ctx, ten.ID, audit.Filter{Type: audit.TypeEgressSecretReflected})
	if err != nil {
		t.Fatal(err)
	}
	// One per sandbox and host per minute: the rest are folded in.
	if len(aud) != 1 || aud[0].Outcome != audit.OutcomeDenied || aud[0].Details["host"] != "echo.secure.test" {
		t.Fatalf("Got(egress.secret_reflected events) = %+v; want 1, denied, naming the host", aud)
	}
	if d := fmt.Sprint(aud[0].Details["secrets"]); !strings.Contains(d, "GH_TOKEN") {
		t.Errorf("Got(audit secrets) = %s; want GH_TOKEN named", d)
	}
	if code, _ := audit.Code(audit.TypeEgressSecretReflected); code != "SE1201W" {
		t.Errorf("Got(code) = %s; want SE1201W", code)
	}
	assertNowhere(t, db, logs.String())
}
