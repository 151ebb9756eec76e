package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestFormInFlightBrowser: a double click on "Create sandbox", and one
// more submit from a script while the first is on its way, send one POST;
// while it is on its way the form is busy (aria-busy, the button disabled
// and labelled "Starting…", a progress bar saying a VM boots); back on the
// page from history the form is idle again. The POSTs are held in the
// browser (the DevTools Fetch domain) until the test lets the first go, so
// every later submit would be counted.
func TestFormInFlightBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "admin@acme-corp.test", tenants.RoleAdmin)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	// eval and poll use the DevTools protocol as is: chromedp's own
	// evaluation waits for a page that is loading, and while a POST is
	// held the page is loading for good.
	eval := func(what, expr string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
		defer cancel()
		res, err := chromedp.Call(ctx, runtime.Evaluate, runtime.EvaluateParams{Expression: "Promise.resolve(" + expr + ").then(String)", ReturnByValue: new(true), AwaitPromise: new(true)})
		if err == nil && res.ExceptionDetails != nil {
			err = errors.New(res.ExceptionDetails.Text)
		}
		var v string
		if err == nil {
			err = json.Unmarshal([]byte(res.Result.Value), &v)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	poll := func(what, expr string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); eval(what, expr) != "true"; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not so after 20 s (%s)", what, expr)
			}
		}
	}
	button := `form[action="/sandboxes"] button[type="submit"]`

	b.Do(t, "sign in as the admin",
		chromedp.Navigate(env.URL+"/sandboxes"),
		chromedp.Click(css(`form[action="/login/start"] button`)),
		chromedp.WaitVisible(css(`input[name="email"]`)),
		chromedp.SendKeys(css(`input[name="email"]`), "admin@acme-corp.test"),
		chromedp.Click(css(`button[value="login"]`)),
		chromedp.WaitVisible(css(button)))
	// This server has no VM pools, so the page disables Create; the POSTs
	// are held in the browser, and the guard is what is tested.
	eval("enable Create", `document.querySelector(`+jsString(button)+`).disabled = false`)

	var mu sync.Mutex
	var posts []fetch.RequestID
	if err := chromedp.Listen(b.Ctx, func(ev any) {
		p, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		if p.Request.Method != "POST" {
			go chromedp.Call(b.Ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: p.RequestID})
			return
		}
		mu.Lock()
		posts = append(posts, p.RequestID)
		mu.Unlock()
		// 204: the browser stays on the page, which still waits for
		// an answer that replaces it, as it would for a slow VM boot.
		go chromedp.Call(b.Ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: p.RequestID, ResponseCode: 204})
	}); err != nil {
		t.Fatal(err)
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(posts) }
	if _, err := chromedp.Call(b.Ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/sandboxes", RequestStage: fetch.RequestStageRequest}}}); err != nil {
		t.Fatal(err)
	}

	b.Do(t, "double-click Create", chromedp.DoubleClick(css(button)))
	deadline := time.Now().Add(20 * time.Second)
	for count() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if count() == 0 {
		t.Fatal("Got(no POST /sandboxes) after clicking Create; want one")
	}
	poll("the busy state", `!!document.querySelector('form[action="/sandboxes"][aria-busy="true"][data-busy] button[disabled][data-busy-submitter]')`)
	if got := strings.TrimSpace(eval("button label", `document.querySelector(`+jsString(button)+`).textContent`)); got != "Starting…" {
		t.Errorf("Got(button while creating) = %q; want Starting…", got)
	}
	if got := eval("progress", `(document.querySelector('form[action="/sandboxes"] .busy-progress[role="status"]') || {textContent: ""}).textContent`); !strings.Contains(got, "booting a VM") || eval("bar", `!!document.querySelector('.busy-progress progress:not([value])')`) != "true" {
		t.Errorf("Got(progress while creating) = %q; want an indeterminate progress bar saying a VM boots", got)
	}
	if shot, err := chromedp.Call(b.Ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{}); err != nil {
		t.Errorf("screenshot of the busy form: %v", err)
	} else if err := os.WriteFile(filepath.Join(artifacts, "sandbox-create-busy.png"), shot.Data, 0o644); err != nil {
		t.Errorf("save the screenshot: %v", err)
	}
	// A script (or the Enter key) submitting again is refused too.
	eval("submit again", `document.querySelector('form[action="/sandboxes"]').requestSubmit()`)

	// A moment for a second POST to be sent, if it were.
	eval("a moment", `new Promise(r => setTimeout(r, 500))`)
	if n := count(); n != 1 {
		t.Errorf("Got(POST /sandboxes sent) = %d; want 1", n)
	}

	// Away and back to the form: idle again, whether the page came from
	// the back/forward cache or was loaded anew.
	eval("away", `location.assign("/")`)
	poll("the dashboard", `location.pathname === "/" && document.readyState === "complete"`)
	eval("back", `history.back()`)
	poll("the form again", `location.pathname === "/sandboxes" && document.readyState === "complete" && !!document.querySelector(`+jsString(button)+`)`)
	if got := eval("state", `(() => { const f = document.querySelector('form[action="/sandboxes"]'), b = f.querySelector('button[type="submit"]');
		return [f.getAttribute("aria-busy"), f.hasAttribute("data-busy"), b.textContent.trim(), !!f.querySelector(".busy-progress")].join("|"); })()`); got != "|false|Create sandbox|false" {
		t.Errorf("Got(form after going back: aria-busy|data-busy|label|progress) = %q; want |false|Create sandbox|false", got)
	}
	for _, p := range b.Problems() {
		if strings.Contains(p, "status of 503") || strings.Contains(p, "status of 409") || strings.Contains(p, "status of 422") {
			continue // the server has no VM pools: the answer is a refusal, on purpose
		}
		t.Errorf("Got(console problem) = %s; want none", p)
	}
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
