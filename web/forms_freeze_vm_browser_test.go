package web_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestCreateOnceAndFreezeBrowser, on real VMs: a double click on "Create
// sandbox" makes exactly one sandbox (counted in the store). Then an
// operator freezes the tenant while a terminal runs in it: the terminal
// ends saying the tenant was frozen (not "agent closed the stream"), and
// its recording page and the sandbox page say so; the tenant's pages show
// the freeze banner with the reason, and the create form is disabled
// saying why.
func TestCreateOnceAndFreezeBrowser(t *testing.T) {
	dataDir := sandboxtest.NeedVMs(t)
	b := webtest.NewBrowser(t)
	ctx := context.Background()
	db := dbtest.SQLite(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vms, sbx := sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, SampleInterval: time.Second, DefaultTemplate: "busybox"})
	env := webtest.New(t, webtest.Options{DB: db, VMs: vms, Sandboxes: sbx, Operators: []string{"op@platform.test"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "admin@acme-corp.test", tenants.RoleAdmin)
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	if _, err := vms.SetPool(ctx, sys, acme.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, WarmVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	css := webtest.CSS
	create := `form[action="/sandboxes"] button[type="submit"]`
	b.Login(t, env.URL+"/sandboxes", "admin@acme-corp.test", create+":not([disabled])")

	// A VM boots under TCG: the page waits as long as it takes.
	wctx, cancel := context.WithTimeout(b.Ctx, 5*time.Minute)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.DoubleClick(css(create)), chromedp.WaitVisible(css(`[data-testid="sandbox-destroy"]`))); err != nil {
		t.Fatalf("double-click Create and wait for the sandbox page: %v", err)
	}
	list, err := sbx.Store().Sandboxes(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("Got(sandboxes after a double click on Create) = %d; want exactly 1", len(list))
	}
	sb := list[0]

	sess, err := env.Terminals.Open(ctx, audit.Actor{Kind: audit.ActorUser, ID: "admin", Name: "admin@acme-corp.test"}, acme.ID, sb.ID, terminal.OpenRequest{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatalf("open a terminal: %v", err)
	}
	op := env.Login(t, "op@platform.test")
	if s, body := op.JSON(t, http.MethodPost, "/api/v1/tenants/"+acme.ID+"/freeze", map[string]string{"reason": "drill: exfiltration"}, nil); s != http.StatusOK {
		t.Fatalf("Got(freeze) = %d %s; want 200", s, body)
	}
	var ended terminal.Session
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if ended, err = env.Terminals.Session(ctx, acme.ID, sess.ID); err != nil {
			t.Fatal(err)
		}
		if ended.EndedAt != nil || time.Now().After(deadline) {
			break
		}
	}
	if ended.EndedAt == nil || !strings.Contains(ended.EndReason, "its tenant was frozen") {
		t.Errorf("Got(terminal end) = %v %q; want ended saying its tenant was frozen", ended.EndedAt, ended.EndReason)
	}
	admin := env.Login(t, "admin@acme-corp.test")
	if _, page := admin.GetPage(t, "/terminals/"+sess.ID); !strings.Contains(page, "its tenant was frozen") {
		t.Errorf("Got(recording page) without the freeze as the end reason; want it")
	}
	if _, page := admin.GetPage(t, "/sandboxes/"+sb.ID); !strings.Contains(page, "ended by a freeze of its tenant") {
		t.Errorf("Got(sandbox page) without the freeze as its end; want it")
	}

	b.Do(t, "the sandboxes page, frozen", chromedp.Navigate(env.URL+"/sandboxes"), chromedp.WaitVisible(css(`#frozen-banner`)))
	if got := b.Text(t, `#frozen-banner`); !strings.Contains(got, "drill: exfiltration. ") || !strings.Contains(got, "frozen") {
		t.Errorf("Got(banner) = %q; want the freeze with its reason", got)
	}
	if !webtest.Eval[bool](t, b, `document.querySelector(`+webtest.JSString(create)+`).disabled`) {
		t.Errorf("Got(Create enabled while frozen); want it disabled")
	}
	if got := b.Text(t, `main`); !strings.Contains(got, "Disabled: the tenant is frozen") {
		t.Errorf("Got(sandboxes page) without why Create is disabled; want it")
	}
	shoot(t, b, "frozen-sandboxes")
	b.Do(t, "the recording", chromedp.Navigate(env.URL+"/terminals/"+sess.ID), chromedp.WaitVisible(css(`main h1`)))
	shoot(t, b, "frozen-recording")
	b.Do(t, "the sandbox", chromedp.Navigate(env.URL+"/sandboxes/"+sb.ID), chromedp.WaitVisible(css(`main h1`)))
	shoot(t, b, "frozen-sandbox")
	for _, p := range b.Problems() {
		t.Errorf("Got(console problem) = %s; want none", p)
	}
}
