package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestTerminalRecordingCapBrowser: a session that printed past its
// recording cap shows where its recording stopped on the recordings list,
// the replay page (which still replays what was kept) and in the API.
func TestTerminalRecordingCapBrowser(t *testing.T) {
	te := newTermEnvWith(t, terminal.Config{MaxRecordingBytes: 8 << 10})
	env := te.env
	env.Member(t, te.acme, "dev@acme-corp.test", tenants.RoleDeveloper)
	ctx := context.Background()
	ada := audit.Actor{Kind: audit.ActorUser, ID: "ada@acme-corp.test", Name: "ada@acme-corp.test"}
	sess, err := te.svc.Open(ctx, ada, te.acme.ID, te.sb.ID, terminal.OpenRequest{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	c, err := te.svc.Join(ctx, ada, te.acme.ID, te.sb.ID, sess.ID, terminal.JoinRequest{Drive: true, CanDrive: true, Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for m := range c.Out() {
			c.Sent(m)
		}
	}()
	c.Input([]byte("echo kept-$((6*7)); head -c 40000 /dev/zero | tr '\\0' x; echo; exit 0\n"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := te.svc.Session(ctx, te.acme.ID, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Live() {
			if !strings.HasPrefix(s.RecordingTruncated, "truncated at ") {
				t.Fatalf("Got(recording truncated) = %q; want the 8 KiB cap hit", s.RecordingTruncated)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session did not end")
		}
		time.Sleep(20 * time.Millisecond)
	}

	api := env.WithToken(env.Token(t, te.acme, tenants.RoleDeveloper))
	status, body := api.GetPage(t, "/api/v1/terminals/"+sess.ID)
	var got struct {
		Truncated string `json:"recording_truncated"`
		Left      int64  `json:"recording_truncated_bytes"`
	}
	if err := json.Unmarshal([]byte(body), &got); status != http.StatusOK || err != nil ||
		!strings.Contains(got.Truncated, "the session's cap is 8 KiB") || got.Left == 0 {
		t.Errorf("Got(GET /api/v1/terminals/%s) = %d %s; want recording_truncated naming the 8 KiB cap", sess.ID, status, body)
	}

	b := webtest.NewBrowser(t)
	browserLogin(t, b, env.URL, "dev@acme-corp.test")
	b.Do(t, "the recordings list", chromedp.Navigate(env.URL+"/terminals"),
		chromedp.WaitVisible(css(`#terminal-recordings tr[data-session="`+sess.ID+`"] .pill-warn`)))
	if txt := attrOf(t, b, `#terminal-recordings tr[data-session="`+sess.ID+`"] .pill-warn`, "title"); !strings.Contains(txt, "8 KiB") {
		t.Errorf("Got(pill title) = %q; want where and why", txt)
	}
	b.Screenshot(t, artifacts, "terminal-recordings-truncated.png")
	b.Do(t, "replay the truncated recording", chromedp.Navigate(env.URL+"/terminals/"+sess.ID),
		chromedp.WaitVisible(css(`[data-recording-truncated]`)),
		chromedp.WaitVisible(css(`[data-terminal="replay"][data-state="ready"]`)),
		chromedp.SetValue(css(`[data-replay-speed]`), "8"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-replay-speed]").dispatchEvent(new Event("change"))`),
		chromedp.Click(css(`[data-replay="play"]`)),
		chromedp.WaitVisible(css(`[data-terminal="replay"][data-state="done"]`)))
	waitScreen(t, b, "the replay", strings.Repeat("x", 80)) // what was kept, up to the cap
	b.Screenshot(t, artifacts, "terminal-replay-truncated.png")
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("Got(console problems) = %v; want none", p)
	}
}
