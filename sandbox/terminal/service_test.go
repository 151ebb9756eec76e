package terminal_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// fixture is a database with two tenants, each with a running sandbox,
// and a terminal service on local pseudo-terminals.
type fixture struct {
	db      *gorm.DB
	dataDir string
	svc     *terminal.Service
	a, b    tenants.Tenant
	sa, sb  sandbox.Sandbox
}

func newFixture(t *testing.T, db *gorm.DB, cfg terminal.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	st := tenants.NewStore(db, nil)
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	f := &fixture{db: db, dataDir: t.TempDir()}
	var err error
	if f.a, err = st.CreateTenant(ctx, sys, "alpha", "Alpha"); err != nil {
		t.Fatal(err)
	}
	if f.b, err = st.CreateTenant(ctx, sys, "bravo", "Bravo"); err != nil {
		t.Fatal(err)
	}
	f.sa = sandboxtest.Record(t, db, f.a.ID, "ada@alpha.test")
	f.sb = sandboxtest.Record(t, db, f.b.ID, "bob@bravo.test")
	cfg.DataDir = f.dataDir
	if cfg.Shell == nil {
		cfg.Shell = shell
	}
	cfg.Env = shellEnv
	f.svc = terminal.New(db, terminaltest.NewLocal(db), cfg)
	t.Cleanup(func() { f.svc.Close() })
	return f
}

func (f *fixture) auditTypes(t *testing.T, tenantID, sessionID string) []string {
	t.Helper()
	var evs []audit.Event
	if err := f.db.Where("tenant_id = ? AND target_id = ?", tenantID, sessionID).Order("id").Find(&evs).Error; err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func waitEnded(t *testing.T, svc *terminal.Service, tenantID, id string) terminal.Session {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		s, err := svc.Session(context.Background(), tenantID, id)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Live() {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("Got(session %s) still live; want it ended", id)
	return terminal.Session{}
}

// TestServiceSession opens a terminal, drives it to its end and checks
// what is left: the row, the audit trail and a recording that replays the
// output byte for byte, readable by nobody else on the machine.
func TestServiceSession(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			f := newFixture(t, d.DB, terminal.Config{RecordInput: true})
			ctx := context.Background()
			ada := person("ada@alpha.test")
			sess, err := f.svc.Open(ctx, ada, f.a.ID, f.sa.ID, terminal.OpenRequest{Cols: 100, Rows: 30})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			c, err := f.svc.Join(ctx, ada, f.a.ID, f.sa.ID, sess.ID, terminal.JoinRequest{Drive: true, CanDrive: true, Offset: 0})
			if err != nil {
				t.Fatalf("Join: %v", err)
			}
			k := collect(c)
			if h := k.hello(t); h.Role != terminal.RoleDriver || h.Cols != 100 || h.Rows != 30 {
				t.Fatalf("Got(hello) = %+v; want driver, 100x30", h)
			}
			live := f.svc.Live(f.a.ID, "")
			if len(live) != 1 || live[0].ID != sess.ID || live[0].Now.Driver != "ada@alpha.test" {
				t.Errorf("Got(Live) = %+v; want the session, driven by ada", live)
			}
			if got := f.svc.Live(f.b.ID, ""); len(got) != 0 {
				t.Errorf("Got(Live of another tenant) = %d sessions; want none", len(got))
			}
			c.Input([]byte("echo svc-$((40+2)); exit 7\n"))
			k.wait(t)
			ended := waitEnded(t, f.svc, f.a.ID, sess.ID)
			if ended.ExitCode == nil || *ended.ExitCode != 7 || ended.BytesOut != int64(len(k.output())) || ended.BytesIn == 0 {
				t.Errorf("Got(ended session) = %+v; want exit 7, %d bytes out, input counted", ended, len(k.output()))
			}
			if got := f.auditTypes(t, f.a.ID, sess.ID); strings.Join(got, ",") != "terminal.opened,terminal.joined,terminal.closed" {
				t.Errorf("Got(audit) = %v; want opened, joined, closed", got)
			}
			rf, _, err := f.svc.OpenRecording(ctx, f.a.ID, sess.ID)
			if err != nil {
				t.Fatalf("OpenRecording: %v", err)
			}
			defer rf.Close()
			cast, err := terminal.ReadCast(rf)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(cast.Output(), k.output()) || !strings.Contains(string(cast.Output()), "svc-42") {
				t.Errorf("Got(recording output) = %q; want what the driver saw: %q", cast.Output(), k.output())
			}
			if in := string(cast.Input()); in != "echo svc-$((40+2)); exit 7\n" {
				t.Errorf("Got(recorded input) = %q; want the keystrokes (RecordInput)", in)
			}
			fi, err := os.Stat(filepath.Join(f.dataDir, ended.Recording))
			if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != ended.RecordingBytes {
				t.Errorf("Got(recording file) = %v %v; want 0600 of %d bytes", fi, err, ended.RecordingBytes)
			}
			for _, dir := range []string{"recordings", filepath.Join("recordings", f.a.ID)} {
				if fi, err := os.Stat(filepath.Join(f.dataDir, dir)); err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("Got(%s) = %v %v; want a 0700 folder", dir, fi, err)
				}
			}
			if _, err := f.svc.Join(ctx, ada, f.a.ID, f.sa.ID, sess.ID, terminal.JoinRequest{}); !errors.Is(err, terminal.ErrEnded) {
				t.Errorf("Got(Join an ended session) = %v; want ErrEnded", err)
			}
		})
	}
}

// TestServiceIsolation: another tenant's sandbox, session or recording is
// not found, whatever the id.
func TestServiceIsolation(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { testIsolation(t, d.DB) })
	}
}

func testIsolation(t *testing.T, db *gorm.DB) {
	f := newFixture(t, db, terminal.Config{})
	ctx := context.Background()
	ada := person("ada@alpha.test")
	sess, err := f.svc.Open(ctx, ada, f.a.ID, f.sa.ID, terminal.OpenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done := terminaltest.Record(t, f.db, f.dataDir, f.a.ID, f.sa.ID, "ada@alpha.test")
	bob := person("bob@bravo.test")
	checks := []struct {
		name string
		err  error
	}{
		{"Open in A's sandbox as B", func() error {
			_, err := f.svc.Open(ctx, bob, f.b.ID, f.sa.ID, terminal.OpenRequest{})
			return err
		}()},
		{"Join A's live session as B", func() error {
			_, err := f.svc.Join(ctx, bob, f.b.ID, "", sess.ID, terminal.JoinRequest{})
			return err
		}()},
		{"Join A's session through B's sandbox", func() error {
			_, err := f.svc.Join(ctx, bob, f.b.ID, f.sb.ID, sess.ID, terminal.JoinRequest{})
			return err
		}()},
		{"A's session through A's other sandbox id", func() error {
			_, err := f.svc.Join(ctx, ada, f.a.ID, f.sb.ID, sess.ID, terminal.JoinRequest{})
			return err
		}()},
		{"A's recording as B", func() error {
			_, _, err := f.svc.OpenRecording(ctx, f.b.ID, done.ID)
			return err
		}()},
		{"A's session as B", func() error {
			_, err := f.svc.Session(ctx, f.b.ID, done.ID)
			return err
		}()},
		{"End A's session as B", f.svc.End(f.b.ID, sess.ID, "no")},
	}
	for _, c := range checks {
		if !errors.Is(c.err, errdefs.ErrNotFound) {
			t.Errorf("Got(%s) = %v; want not found", c.name, c.err)
		}
	}
	if _, ok := f.svc.LiveState(f.b.ID, sess.ID); ok {
		t.Errorf("Got(LiveState of A's session as B) = found; want not")
	}
	list, err := f.svc.Sessions(ctx, f.b.ID, "")
	if err != nil || len(list) != 0 {
		t.Errorf("Got(B's sessions) = %d, %v; want none", len(list), err)
	}
}

// TestServiceSandboxEnds: when the sandbox ends, its sessions end for
// everyone on them, with the sandbox's reason.
func TestServiceSandboxEnds(t *testing.T) {
	f := newFixture(t, dbtest.SQLite(t), terminal.Config{CheckInterval: 50 * time.Millisecond})
	ctx := context.Background()
	if err := f.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ada := person("ada@alpha.test")
	sess, err := f.svc.Open(ctx, ada, f.a.ID, f.sa.ID, terminal.OpenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ks []*collector
	for _, who := range []terminal.JoinRequest{{Drive: true, CanDrive: true}, {}} {
		c, err := f.svc.Join(ctx, ada, f.a.ID, f.sa.ID, sess.ID, who)
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, collect(c))
	}
	// What sandbox.Service's destroy records.
	if err := f.db.Model(&sandbox.Sandbox{}).Where("id = ?", f.sa.ID).
		Updates(map[string]any{"state": sandbox.StateDestroyed, "state_reason": "requested"}).Error; err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		k.wait(t)
		e := k.waitControl(t, terminal.MsgEnd, func(terminal.Control) bool { return true })
		if e.Reason != "the sandbox was destroyed (requested)" {
			t.Errorf("Got(end reason) = %q; want the sandbox's", e.Reason)
		}
	}
	if s := waitEnded(t, f.svc, f.a.ID, sess.ID); s.EndReason != "the sandbox was destroyed (requested)" {
		t.Errorf("Got(stored end reason) = %q; want the sandbox's", s.EndReason)
	}
	if _, err := f.svc.Open(ctx, ada, f.a.ID, f.sa.ID, terminal.OpenRequest{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Got(Open in a destroyed sandbox) = %v; want a conflict", err)
	}
}

// TestServiceAbandoned: a session nobody connects to ends after
// AbandonAfter.
func TestServiceAbandoned(t *testing.T) {
	f := newFixture(t, dbtest.SQLite(t), terminal.Config{CheckInterval: 50 * time.Millisecond, AbandonAfter: 300 * time.Millisecond})
	if err := f.svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sess, err := f.svc.Open(context.Background(), person("ada@alpha.test"), f.a.ID, f.sa.ID, terminal.OpenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s := waitEnded(t, f.svc, f.a.ID, sess.ID); !strings.HasPrefix(s.EndReason, "nobody was connected") {
		t.Errorf("Got(end reason) = %q; want abandoned", s.EndReason)
	}
}

// TestServiceRetention: a recording past its retention is removed, its row
// stays and says so; younger ones stay.
func TestServiceRetention(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { testRetention(t, d.DB) })
	}
}

func testRetention(t *testing.T, db *gorm.DB) {
	clk := clockwork.NewFakeClockAt(time.Now())
	f := newFixture(t, db, terminal.Config{Clock: clk, RetentionDays: 30})
	ctx := context.Background()
	ada := person("ada@alpha.test")
	open := func() terminal.Session {
		sess, err := f.svc.Open(ctx, ada, f.a.ID, f.sa.ID, terminal.OpenRequest{Argv: []string{"sh", "-c", "echo bye"}})
		if err != nil {
			t.Fatal(err)
		}
		return waitEnded(t, f.svc, f.a.ID, sess.ID)
	}
	old := open()
	clk.Advance(20 * 24 * time.Hour)
	young := open()
	clk.Advance(11 * 24 * time.Hour)
	f.svc.Sweep(ctx)
	if _, _, err := f.svc.OpenRecording(ctx, f.a.ID, old.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Got(recording past retention) = %v; want not found", err)
	}
	if _, err := os.Stat(filepath.Join(f.dataDir, old.Recording)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Got(file past retention) = %v; want removed", err)
	}
	if s, err := f.svc.Session(ctx, f.a.ID, old.ID); err != nil || s.PurgedAt == nil || s.Recording != "" {
		t.Errorf("Got(row past retention) = %+v, %v; want kept, marked purged", s, err)
	}
	rf, _, err := f.svc.OpenRecording(ctx, f.a.ID, young.ID)
	if err != nil {
		t.Fatalf("Got(younger recording) = %v; want kept", err)
	}
	b, _ := io.ReadAll(rf)
	rf.Close()
	if !strings.Contains(string(b), "bye") {
		t.Errorf("Got(younger recording) = %q; want its output", b)
	}
}

// TestServiceLostSessions: a session left live by a server that stopped is
// recorded as ended when another (or the same, restarted) starts.
func TestServiceLostSessions(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { testLostSessions(t, d.DB) })
	}
}

func testLostSessions(t *testing.T, db *gorm.DB) {
	f := newFixture(t, db, terminal.Config{})
	lost := terminaltest.Record(t, db, f.dataDir, f.a.ID, f.sa.ID, "ada@alpha.test")
	old := time.Now().Add(-time.Hour).UTC()
	if err := db.Model(&terminal.Session{}).Where("id = ?", lost.ID).
		Updates(map[string]any{"ended_at": nil, "end_reason": "", "seen_at": old}).Error; err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := waitEnded(t, f.svc, f.a.ID, lost.ID)
	if !strings.HasPrefix(s.EndReason, "lost") || s.RecordingBytes != lost.RecordingBytes {
		t.Errorf("Got(lost session) = %q, %d bytes; want ended as lost, its recording counted", s.EndReason, s.RecordingBytes)
	}
}

// TestServiceCrashedSessionReaped: a server crashed with a terminal open
// (its row live, seen only when it opened, its recording on disk ending in a
// torn line). The next server, the only one of the installation, records it
// ended at once, at its last recorded event, with the bytes recorded.
func TestServiceCrashedSessionReaped(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		exclusive bool
		reaped    bool
	}{{"exclusive", true, true}, {"shared", false, false}} {
		for _, d := range dbtest.Databases(t) {
			t.Run(tc.name+"/"+d.Name, func(t *testing.T) {
				{
					f := newFixture(t, d.DB, terminal.Config{Exclusive: tc.exclusive})
					crashed := terminaltest.Record(t, d.DB, f.dataDir, f.a.ID, f.sa.ID, "ada@alpha.test")
					path := filepath.Join(f.dataDir, crashed.Recording)
					fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := fh.WriteString(`[2.9000`); err != nil { // the write the crash cut short
						t.Fatal(err)
					}
					fh.Close()
					fi, err := os.Stat(path)
					if err != nil {
						t.Fatal(err)
					}
					// Seen only at open, just now: the row of a server that died
					// within its first 30 s.
					if err := d.DB.Model(&terminal.Session{}).Where("id = ?", crashed.ID).Updates(map[string]any{"ended_at": nil,
						"end_reason": "", "exit_code": nil, "bytes_out": 0, "recording_bytes": 0, "seen_at": crashed.StartedAt}).Error; err != nil {
						t.Fatal(err)
					}
					if err := f.svc.Start(ctx); err != nil {
						t.Fatal(err)
					}
					s, err := f.svc.Session(ctx, f.a.ID, crashed.ID)
					if err != nil {
						t.Fatal(err)
					}
					if !tc.reaped {
						// Another server may hold it: left to the 3 min rule.
						if !s.Live() {
							t.Errorf("Got(session seen %v ago, servers shared) ended %v; want it left live", time.Since(s.SeenAt), s.EndedAt)
						}
						return
					}
					if s.Live() || !strings.HasPrefix(s.EndReason, "lost") {
						t.Fatalf("Got(crashed session after Start) = live %v, %q; want ended as lost at once", s.Live(), s.EndReason)
					}
					if want := crashed.StartedAt.Add(2500 * time.Millisecond); !s.EndedAt.Equal(want) {
						t.Errorf("Got(ended_at) = %v (%v after start); want %v: its last recorded event", s.EndedAt, s.EndedAt.Sub(crashed.StartedAt), want)
					}
					if s.BytesOut != int64(len(terminaltest.RecordedOutput)) || s.RecordingBytes != fi.Size() {
						t.Errorf("Got(bytes_out, recording_bytes) = %d, %d; want %d, %d", s.BytesOut, s.RecordingBytes,
							len(terminaltest.RecordedOutput), fi.Size())
					}
					var ev audit.Event
					if err := d.DB.Where("target_id = ? AND type = ?", crashed.ID, audit.TypeTerminalClosed).Take(&ev).Error; err != nil {
						t.Fatalf("terminal.closed of the crashed session: %v", err)
					}
					if got := ev.Details["duration_ms"]; got != float64(2500) && got != int64(2500) {
						t.Errorf("Got(terminal.closed duration_ms) = %v (%T); want 2500", got, got)
					}
				}
			})
		}
	}
}
