package handlers_test

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// termEnv is the web app with terminals on this machine's pseudo-terminals
// (the sandboxes are records: no VM), two tenants with a running sandbox.
type termEnv struct {
	env         *webtest.Env
	svc         *terminal.Service
	acme, other tenants.Tenant
	sb, otherSB sandbox.Sandbox
}

func newTermEnv(t *testing.T) *termEnv { return newTermEnvWith(t, terminal.Config{}) }

// newTermEnvWith is newTermEnv with cfg's recording caps.
func newTermEnvWith(t *testing.T, cfg terminal.Config) *termEnv {
	t.Helper()
	db := dbtest.SQLite(t)
	svc := terminal.New(db, terminaltest.NewLocal(db), terminal.Config{DataDir: t.TempDir(), Shell: []string{"/bin/sh"}, Logger: slog.New(slog.DiscardHandler),
		Env: []string{"PS1=$ ", "TERM=xterm-256color", "ENV="}, CheckInterval: 100 * time.Millisecond,
		MaxRecordingBytes: cfg.MaxRecordingBytes, MaxTenantRecordingBytes: cfg.MaxTenantRecordingBytes})
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	te := &termEnv{svc: svc}
	te.env = webtest.New(t, webtest.Options{DB: db, Terminals: svc})
	te.acme = te.env.TenantNamed(t, "acme-corp", "Acme Corporation")
	te.other = te.env.TenantNamed(t, "globex", "Globex Industries")
	te.sb = sandboxtest.Record(t, db, te.acme.ID, "ada@acme-corp.test")
	te.otherSB = sandboxtest.Record(t, db, te.other.ID, "hank@globex.test")
	return te
}

// dial opens the terminal of sandboxID as cl (a person's session or an API
// token) with query q.
func (te *termEnv) dial(t *testing.T, cl *webtest.Client, sandboxID string, q url.Values) (*terminaltest.Conn, error) {
	t.Helper()
	u, err := terminal.SocketURL(te.env.URL, sandboxID, q)
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{}
	if cl.Bearer != "" {
		hdr.Set("Authorization", "Bearer "+cl.Bearer)
	} else {
		hdr.Set("Origin", te.env.URL) // a browser on one of our pages
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, err := terminal.Dial(ctx, u, hdr, cl.Jar)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { ws.Close() })
	return terminaltest.NewConn(ws, nil), nil
}

const wait = 10 * time.Second

// TestTerminalSocketAuthorization is the authorization table of the
// terminal WebSocket: developers and admins drive; managers and auditors
// only watch; billing neither; another tenant's sandbox is not found; a
// page of another site may not connect; nobody signed in is refused. Every
// row does a real WebSocket handshake.
func TestTerminalSocketAuthorization(t *testing.T) {
	te := newTermEnv(t)
	env := te.env
	// A live session to watch and join, held by an agent's token.
	agent, err := te.dial(t, env.WithToken(env.Token(t, te.acme, tenants.RoleDeveloper)), te.sb.ID, nil)
	if err != nil {
		t.Fatalf("open the live session: %v", err)
	}
	live := agent.Hello(t).Session

	type who struct {
		name   string
		client *webtest.Client
		drive  bool // may drive
		watch  bool // may watch
		other  bool // of another tenant
	}
	var callers []who
	for _, role := range tenants.Roles {
		email := string(role) + "@acme-corp.test"
		env.Member(t, te.acme, email, role)
		drive := role == tenants.RoleAdmin || role == tenants.RoleDeveloper
		watch := drive || role == tenants.RoleManager || role == tenants.RoleAuditor
		callers = append(callers,
			who{"session " + string(role), env.Login(t, email), drive, watch, false},
			who{"token " + string(role), env.WithToken(env.Token(t, te.acme, role)), drive, watch, false})
	}
	env.Member(t, te.other, "admin@globex.test", tenants.RoleAdmin)
	callers = append(callers,
		who{"other tenant's admin session", env.Login(t, "admin@globex.test"), false, false, true},
		who{"other tenant's admin token", env.WithToken(env.Token(t, te.other, tenants.RoleAdmin)), false, false, true})

	modes := []struct {
		name  string
		q     url.Values
		drive bool   // needs terminals.drive
		role  string // the role a connection gets
	}{
		{"open", url.Values{"cols": {"100"}, "rows": {"30"}}, true, terminal.RoleDriver},
		{"join", url.Values{"session": {live}}, true, terminal.RoleWatcher}, // the agent holds control
		{"watch", url.Values{"session": {live}, "watch": {"1"}}, false, terminal.RoleWatcher},
	}
	for _, c := range callers {
		for _, m := range modes {
			t.Run(c.name+"/"+m.name, func(t *testing.T) {
				w, err := te.dial(t, c.client, te.sb.ID, m.q)
				want := http.StatusSwitchingProtocols
				switch {
				case c.other:
					want = http.StatusNotFound
				case !c.watch || (m.drive && !c.drive):
					want = http.StatusForbidden
				}
				if want != http.StatusSwitchingProtocols {
					de, ok := err.(*terminal.DialError)
					if !ok || de.Status != want {
						t.Fatalf("Got(handshake) = %v; want %d", err, want)
					}
					if want == http.StatusForbidden && de.Detail == "" {
						t.Errorf("Got(403) without a detail; want it to say why")
					}
					return
				}
				if err != nil {
					t.Fatalf("Got(handshake) = %v; want 101", err)
				}
				h := w.Hello(t)
				if h.Role != m.role || h.CanDrive != c.drive {
					t.Errorf("Got(hello) role %q can_drive %v; want %q, %v", h.Role, h.CanDrive, m.role, c.drive)
				}
				if m.name == "open" && (h.Cols != 100 || h.Rows != 30 || h.Session == live) {
					t.Errorf("Got(hello of a new terminal) = %+v; want a new 100x30 session", h)
				}
			})
		}
	}

	dev := env.Login(t, "developer@acme-corp.test")
	t.Run("anonymous", func(t *testing.T) {
		_, err := te.dial(t, env.Anonymous(), te.sb.ID, nil)
		if de, ok := err.(*terminal.DialError); !ok || de.Status != http.StatusUnauthorized {
			t.Errorf("Got(handshake) = %v; want 401", err)
		}
	})
	t.Run("another site's page", func(t *testing.T) {
		u, _ := terminal.SocketURL(env.URL, te.sb.ID, nil)
		_, err := terminal.Dial(context.Background(), u, http.Header{"Origin": {"https://evil.example"}}, dev.Jar)
		if de, ok := err.(*terminal.DialError); !ok || de.Status != http.StatusForbidden {
			t.Errorf("Got(handshake from another origin) = %v; want 403", err)
		}
	})
	t.Run("not a WebSocket", func(t *testing.T) {
		if s, body, _ := dev.Request(t, http.MethodGet, "/api/v1/sandboxes/"+te.sb.ID+"/terminal", "", nil); s != http.StatusBadRequest {
			t.Errorf("Got(plain GET) = %d %.200s; want 400", s, body)
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		_, err := te.dial(t, dev, te.sb.ID, url.Values{"session": {"01900000-0000-7000-8000-000000000000"}})
		if de, ok := err.(*terminal.DialError); !ok || de.Status != http.StatusNotFound {
			t.Errorf("Got(handshake) = %v; want 404", err)
		}
	})
	t.Run("session of another sandbox", func(t *testing.T) {
		sb2 := sandboxtest.Record(t, env.DB, te.acme.ID, "ada@acme-corp.test")
		_, err := te.dial(t, dev, sb2.ID, url.Values{"session": {live}})
		if de, ok := err.(*terminal.DialError); !ok || de.Status != http.StatusNotFound {
			t.Errorf("Got(handshake) = %v; want 404", err)
		}
	})
}

// TestTerminalWebSocket drives a terminal the way an agent and people do:
// the agent opens it with its token and types; a developer, a manager and
// an auditor see the same; the developer asks for control and takes it; a
// watcher that drops comes back and misses nothing; destroying the sandbox
// ends the session for everyone with the reason; the recording replays
// byte for byte and the audit log has it all.
func TestTerminalWebSocket(t *testing.T) {
	te := newTermEnv(t)
	env := te.env
	for email, role := range map[string]tenants.Role{"dev@acme-corp.test": tenants.RoleDeveloper,
		"boss@acme-corp.test": tenants.RoleManager, "audit@acme-corp.test": tenants.RoleAuditor} {
		env.Member(t, te.acme, email, role)
	}
	agent, err := te.dial(t, env.WithToken(env.Token(t, te.acme, tenants.RoleDeveloper)), te.sb.ID, url.Values{"cols": {"90"}, "rows": {"25"}})
	if err != nil {
		t.Fatal(err)
	}
	session := agent.Hello(t).Session
	agent.WaitOutput(t, "$ ", wait)
	join := func(email string, q url.Values) *terminaltest.Conn {
		t.Helper()
		q.Set("session", session)
		w, err := te.dial(t, env.Login(t, email), te.sb.ID, q)
		if err != nil {
			t.Fatalf("join as %s: %v", email, err)
		}
		return w
	}
	dev := join("dev@acme-corp.test", url.Values{})
	boss := join("boss@acme-corp.test", url.Values{"watch": {"1"}})
	auditor := join("audit@acme-corp.test", url.Values{"watch": {"1"}, "offset": {"0"}})
	for _, w := range []*terminaltest.Conn{dev, boss, auditor} {
		if h := w.Hello(t); h.Role != terminal.RoleWatcher || h.Cols != 90 {
			t.Fatalf("Got(hello) = %+v; want a watcher of the 90-column terminal", h)
		}
	}

	agent.Type(t, "echo agent-$((6*7))\n")
	for _, w := range []*terminaltest.Conn{agent, dev, boss, auditor} {
		w.WaitOutput(t, "agent-42", wait)
	}
	boss.WaitControl(t, terminal.MsgPresence, func(c terminal.Control) bool { return len(c.Watchers) == 3 }, wait)

	// The handover: ask, then take.
	dev.Send(t, terminal.Control{Type: terminal.MsgRequest})
	agent.WaitControl(t, terminal.MsgRequested, func(c terminal.Control) bool { return c.By == "dev@acme-corp.test" }, wait)
	dev.Send(t, terminal.Control{Type: terminal.MsgTake})
	dev.WaitControl(t, terminal.MsgRole, func(c terminal.Control) bool { return c.Role == terminal.RoleDriver }, wait)
	agent.WaitControl(t, terminal.MsgRole, func(c terminal.Control) bool { return c.Role == terminal.RoleWatcher }, wait)
	agent.Type(t, "echo ignored\n")
	agent.WaitControl(t, terminal.MsgError, nil, wait)
	dev.Type(t, "echo dev-$((2+3))\n")
	boss.WaitOutput(t, "dev-5", wait)

	// The manager's connection drops; output goes on; it resumes.
	seen := boss.Output()
	boss.WS.Close()
	dev.Type(t, "for i in 1 2 3; do echo gone-$i; done\n")
	dev.WaitOutput(t, "gone-3\r\n", wait)
	back := join("boss@acme-corp.test", url.Values{"watch": {"1"}, "offset": {strconv.Itoa(len(seen))}})
	if h := back.Hello(t); h.Offset == nil || *h.Offset != int64(len(seen)) || h.Missed != 0 {
		t.Fatalf("Got(resumed hello) = %+v; want offset %d, nothing missed", h, len(seen))
	}
	dev.Type(t, "echo back-$((3*3))\n")
	back.WaitOutput(t, "back-9", wait)
	agent.WaitOutput(t, "back-9", wait)
	if got, want := append(seen, back.Output()...), agent.Output(); !bytes.Equal(got, want) {
		t.Errorf("Got(before + after the drop) = %q; want the whole stream %q", got, want)
	}

	// Destroying the sandbox (what sandbox.Service records) ends it for all.
	if err := env.DB.Model(&sandbox.Sandbox{}).Where("id = ?", te.sb.ID).
		Updates(map[string]any{"state": sandbox.StateDestroyed, "state_reason": "requested"}).Error; err != nil {
		t.Fatal(err)
	}
	for _, w := range []*terminaltest.Conn{agent, dev, back, auditor} {
		w.Wait(t, 15*time.Second)
		e := w.WaitControl(t, terminal.MsgEnd, nil, wait)
		if code, _ := w.Closed(); e.Reason != "the sandbox was destroyed (requested)" || code != websocket.CloseNormalClosure {
			t.Errorf("Got(end) = %q, close %d; want the sandbox's reason and a normal close", e.Reason, code)
		}
	}

	// The recording, downloaded by the auditor, is what the agent saw.
	aud := env.Login(t, "audit@acme-corp.test")
	var info struct {
		Live         bool   `json:"live"`
		EndReason    string `json:"end_reason"`
		RecordingURL string `json:"recording_url"`
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if s, body := aud.JSON(t, http.MethodGet, "/api/v1/terminals/"+session, nil, &info); s != http.StatusOK {
			t.Fatalf("Got(GET terminal) = %d %s; want 200", s, body)
		}
		if !info.Live {
			break
		}
	}
	if info.Live || info.EndReason != "the sandbox was destroyed (requested)" {
		t.Fatalf("Got(session) = %+v; want ended with the sandbox's reason", info)
	}
	s, body, hdr := aud.Request(t, http.MethodGet, info.RecordingURL, "", nil)
	if s != http.StatusOK || hdr.Get("Content-Type") != "application/x-asciicast" || !strings.Contains(hdr.Get("Content-Disposition"), "attachment") {
		t.Fatalf("Got(GET %s) = %d %s %q; want an asciicast attachment", info.RecordingURL, s, hdr.Get("Content-Type"), hdr.Get("Content-Disposition"))
	}
	cast, err := terminal.ReadCast(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if got := cast.Output(); !bytes.Equal(got, agent.Output()) {
		t.Errorf("Got(replayed output) = %q; want what the agent saw, byte for byte: %q", got, agent.Output())
	}
	var evs []audit.Event
	if err := env.DB.Where("tenant_id = ? AND target_id = ?", te.acme.ID, session).Order("id").Find(&evs).Error; err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range evs {
		count[e.Type]++
	}
	want := map[string]int{"terminal.opened": 1, "terminal.joined": 5, "terminal.control_taken": 1, "terminal.closed": 1}
	if !maps.Equal(count, want) {
		t.Errorf("Got(audit of the session) = %v; want %v (joins: agent, developer, manager, auditor, manager again)", count, want)
	}
}
