package forward_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/web/forward"
	"github.com/stockade-dev/stockade/web/forward/forwardtest"
)

var key = []byte("0123456789abcdef0123456789abcdef")

// noSandboxes: these tests route by VM, never by sandbox.
type noSandboxes struct{}

func (noSandboxes) Sandbox(context.Context, string, string) (sandbox.Sandbox, error) {
	return sandbox.Sandbox{}, errdefs.ErrNotFound
}

func newForwarder(t *testing.T, dir *forwardtest.Directory, id string, k []byte, clock clockwork.Clock) *forward.Forwarder {
	t.Helper()
	f, err := forward.New(forward.Config{Owners: dir.Replica(id), Sandboxes: noSandboxes{}, Key: k, Clock: clock})
	if err != nil {
		t.Fatalf("forward.New: %v", err)
	}
	return f
}

// signed is the signature header replica a's forwarder puts on a request
// to the owner b for principal, as b receives it.
func signed(t *testing.T, a *forward.Forwarder, method, target, principal string) *http.Request {
	t.Helper()
	var got *http.Request
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Clone(context.Background()) }))
	defer owner.Close()
	req := httptest.NewRequest(method, target, nil)
	req.RemoteAddr = "192.0.2.7:4711"
	a.Proxy(httptest.NewRecorder(), req, forward.Replica{ID: "b", InternalURL: owner.URL}, principal, "/x", func(_ http.ResponseWriter, _ *http.Request, err error) {
		t.Fatalf("proxy: %v", err)
	})
	if got == nil {
		t.Fatal("Got(owner request) = none; want the forwarded request")
	}
	return got
}

// TestVerify: the owner accepts a forward signature only when a replica
// with the installation's key made it just now, for this very method,
// path, query and principal; anything a client could make is refused.
func TestVerify(t *testing.T) {
	dir := forwardtest.NewDirectory()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	a := newForwarder(t, dir, "a", key, clock)
	b := newForwarder(t, dir, "b", key, clock)
	stranger := newForwarder(t, dir, "a", []byte("another installation's key....."), clock)
	const principal = "token:tok1@tenant1"
	good := signed(t, a, http.MethodPost, "/api/v1/sandboxes/s1/exec?stream=1", principal)
	sig := good.Header.Values(forward.Header)
	if len(sig) != 1 {
		t.Fatalf("Got(signature headers) = %q; want one", sig)
	}
	for _, tc := range []struct {
		name      string
		method    string
		target    string
		principal string
		sig       []string
		skew      time.Duration
		by        *forward.Forwarder
		want      bool
	}{
		{name: "as signed", want: true},
		{name: "none", sig: []string{}},
		{name: "no signature at all", sig: nil, want: false},
		{name: "another principal", principal: "token:tok2@tenant1"},
		{name: "another tenant", principal: "token:tok1@tenant2"},
		{name: "another method", method: http.MethodGet},
		{name: "another path", target: "/api/v1/sandboxes/s2/exec?stream=1"},
		{name: "another query", target: "/api/v1/sandboxes/s1/exec?stream=0"},
		{name: "stale", skew: forward.DefaultMaxSkew + time.Second},
		{name: "from the future", skew: -forward.DefaultMaxSkew - time.Second},
		{name: "forged by a client", sig: []string{"v1 a 1796126400 192.0.2.7:4711 AAAA"}},
		{name: "garbage", sig: []string{"trust me"}},
		{name: "twice", sig: []string{sig[0], sig[0]}},
		{name: "from itself", by: a},
		{name: "another installation", by: stranger},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, target, p, s, by := http.MethodPost, "/api/v1/sandboxes/s1/exec?stream=1", principal, sig, b
			if tc.method != "" {
				method = tc.method
			}
			if tc.target != "" {
				target = tc.target
			}
			if tc.principal != "" {
				p = tc.principal
			}
			if tc.sig != nil || tc.name == "no signature at all" {
				s = tc.sig
			}
			if tc.by != nil {
				by = tc.by
			}
			clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).Add(tc.skew))
			if tc.skew != 0 {
				by = newForwarder(t, dir, "b", key, clock)
			}
			r := httptest.NewRequest(method, target, nil)
			ok, err := by.Verify(r, s, p)
			if ok != tc.want {
				t.Errorf("Got(forwarded) = %v; want %v", ok, tc.want)
			}
			if wantErr := !tc.want && len(s) > 0; (err != nil) != wantErr {
				t.Errorf("Got(err) = %v; want an error %v", err, wantErr)
			}
			if err != nil && !errors.Is(err, errdefs.ErrForbidden) {
				t.Errorf("Got(err) = %v; want errdefs.ErrForbidden", err)
			}
			if tc.want && r.RemoteAddr != "192.0.2.7:4711" {
				t.Errorf("Got(RemoteAddr) = %q; want the client's, 192.0.2.7:4711", r.RemoteAddr)
			}
		})
	}
	// A client's own header never reaches the owner: the replica replaces it.
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.Header.Set(forward.Header, "v1 c 1 1.2.3.4:5 forged")
	if vals := forward.Take(req); len(vals) != 1 || req.Header.Get(forward.Header) != "" {
		t.Errorf("Got(Take) = %q, left %q; want the value taken off the request", vals, req.Header.Get(forward.Header))
	}
}

// pair is replica a (front) forwarding everything to owner b, which
// checks each request's signature before its handler.
type pair struct {
	front *httptest.Server
	a, b  *forward.Forwarder
}

func newPair(t *testing.T, owner http.Handler) *pair {
	t.Helper()
	dir := forwardtest.NewDirectory()
	p := &pair{a: newForwarder(t, dir, "a", key, nil), b: newForwarder(t, dir, "b", key, nil)}
	back := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, err := p.b.Verify(r, forward.Take(r), "user:u1@t1"); !ok || err != nil {
			http.Error(w, "unsigned", http.StatusForbidden)
			return
		}
		owner.ServeHTTP(w, r)
	}))
	t.Cleanup(back.Close)
	dir.SetURL("b", back.URL)
	dir.Own("vm1", "b")
	p.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o, self, err := p.a.OwnerOfVM(r.Context(), "vm1")
		if err != nil || self {
			http.Error(w, "no owner", http.StatusServiceUnavailable)
			return
		}
		p.a.Proxy(w, r, o, "user:u1@t1", "/x", func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		})
	}))
	t.Cleanup(p.front.Close)
	return p
}

// wait fails the test rather than hang when ch never delivers.
func wait[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("Got(%s) = nothing within a minute; want it", what)
		var zero T
		return zero
	}
}

// TestProxyStreams: answers stream through as the owner writes them (an
// event stream's first event arrives while the owner still holds the
// stream open), request bodies stream to the owner (it reads the first
// part before the client has sent the rest), and WebSockets are spliced.
func TestProxyStreams(t *testing.T) {
	release := make(chan struct{})
	firstPart := make(chan string, 1)
	up := websocket.Upgrader{}
	p := newPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/events":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: start\ndata: {}\n\n")
			w.(http.Flusher).Flush()
			<-release
			_, _ = io.WriteString(w, "event: end\ndata: {}\n\n")
		case "/upload":
			buf := make([]byte, 5)
			if _, err := io.ReadFull(r.Body, buf); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			firstPart <- string(buf)
			rest, _ := io.ReadAll(r.Body)
			_, _ = io.WriteString(w, string(buf)+string(rest))
		case "/ws":
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			for {
				mt, msg, err := c.ReadMessage()
				if err != nil {
					return
				}
				_ = c.WriteMessage(mt, append([]byte("echo "), msg...))
			}
		}
	}))

	t.Run("event stream", func(t *testing.T) {
		resp, err := http.Get(p.front.URL + "/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		if got := wait(t, "first event line", lines); got != "event: start" {
			t.Fatalf("Got(first line) = %q; want event: start", got)
		}
		close(release)
		var rest []string
		for l := range lines {
			rest = append(rest, l)
		}
		if got := strings.Join(rest, "|"); got != "data: {}||event: end|data: {}|" {
			t.Errorf("Got(rest) = %q; want the end event", got)
		}
	})

	t.Run("request body", func(t *testing.T) {
		pr, pw := io.Pipe()
		done := make(chan string, 1)
		go func() {
			resp, err := http.Post(p.front.URL+"/upload", "application/octet-stream", pr)
			if err != nil {
				done <- err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			done <- string(b)
		}()
		_, _ = io.WriteString(pw, "hello")
		if got := wait(t, "the owner reading the first part", firstPart); got != "hello" {
			t.Fatalf("Got(first part) = %q; want hello", got)
		}
		_, _ = io.WriteString(pw, " world")
		_ = pw.Close()
		if got := wait(t, "the answer", done); got != "hello world" {
			t.Errorf("Got(answer) = %q; want hello world", got)
		}
	})

	t.Run("websocket", func(t *testing.T) {
		c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(p.front.URL, "http")+"/ws", nil)
		if err != nil {
			t.Fatalf("dial through the replica: %v (%v)", err, resp)
		}
		defer c.Close()
		for _, m := range []string{"one", "two"} {
			if err := c.WriteMessage(websocket.BinaryMessage, []byte(m)); err != nil {
				t.Fatal(err)
			}
			_, got, err := c.ReadMessage()
			if err != nil || string(got) != "echo "+m {
				t.Fatalf("Got(echo of %s) = %q, %v; want echo %s", m, got, err, m)
			}
		}
	})
}

// TestProxyOwnerDown: an owner that does not answer is a 503 in the
// surface's shape (fail), counted; nothing hangs.
func TestProxyOwnerDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	dir := forwardtest.NewDirectory()
	a := newForwarder(t, dir, "a", key, nil)
	rec := httptest.NewRecorder()
	var got error
	a.Proxy(rec, httptest.NewRequest(http.MethodGet, "/x", nil), forward.Replica{ID: "b", InternalURL: url}, "p", "/x",
		func(w http.ResponseWriter, _ *http.Request, err error) {
			got = err
			w.WriteHeader(http.StatusServiceUnavailable)
		})
	if !errors.Is(got, errdefs.ErrUnavailable) || rec.Code != http.StatusServiceUnavailable {
		t.Errorf("Got(owner down) = %d, %v; want 503 and errdefs.ErrUnavailable", rec.Code, got)
	}
	// No owner at all is a NoOwnerError: ErrUnavailable, retry later.
	if _, _, err := a.OwnerOfVM(context.Background(), "vm-nobody"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Got(OwnerOfVM without a lease) = %v; want errdefs.ErrUnavailable", err)
	}
}
