package sandbox_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/web/webtest"
)

// createForm is the sandbox create form of a page: what a browser would
// send for it untouched (inputs' values, each select's selected option),
// and each input's attributes by name.
func createForm(t *testing.T, page string) (url.Values, map[string]map[string]string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	attrs := func(n *html.Node) map[string]string {
		m := map[string]string{}
		for _, a := range n.Attr {
			m[a.Key] = a.Val
		}
		return m
	}
	vals, inputs := url.Values{}, map[string]map[string]string{}
	var walk func(n *html.Node, in bool, sel string)
	walk = func(n *html.Node, in bool, sel string) {
		if n.Type == html.ElementNode {
			a := attrs(n)
			switch {
			case n.Data == "form":
				in = a["action"] == "/sandboxes"
			case in && n.Data == "input" && a["name"] != "" && a["name"] != "_csrf":
				vals.Set(a["name"], a["value"])
				inputs[a["name"]] = a
			case in && n.Data == "select":
				sel = a["name"]
			case in && n.Data == "option" && sel != "":
				if _, ok := a["selected"]; ok || !vals.Has(sel) {
					vals.Set(sel, a["value"])
				}
			}
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch, in, sel)
		}
	}
	walk(doc, false, "")
	if len(inputs) == 0 {
		t.Fatalf("Got(page) without the create form: %.500s", page)
	}
	return vals, inputs
}

// TestPageCreateTakesPolicyDefaults: a sandbox created from the page with
// no size given (the form sent as shown, or with its sizes left empty)
// gets the tenant policy's default memory and lifetime, as one the API
// creates without sizes does, and the form shows those defaults and the
// policy's bounds. Real VM (the shared warm one),
// real page through the web app.
func TestPageCreateTakesPolicyDefaults(t *testing.T) {
	e := need(t)
	actor := audit.Actor{Kind: audit.ActorSystem, ID: "test", Name: "create form test"}
	ps, err := policy.NewStore(e.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	doc := policy.Defaults()
	doc.Resources.MaxMemoryMiB, doc.Resources.DefaultMemoryMiB = 384, 96
	doc.Lifetime.MaxTimeoutSeconds, doc.Lifetime.DefaultTimeoutSeconds = 7200, 1800
	v, err := ps.Save(ctx, actor, e.a.ID, policy.Edit{Doc: doc, Reason: "create form defaults test"})
	if err != nil {
		t.Fatal(err)
	}
	// A service with policies on the shared pools (the shared one, without,
	// keeps syncing every sandbox), and the web app on it.
	svc := sandbox.New(e.db, e.pools(), sandbox.Config{DataDir: e.dataDir, Logger: e.log, DefaultTemplate: "busybox", Policies: ps})
	defer svc.Close()
	w := webtest.New(t, webtest.Options{DB: e.db, VMs: e.pools(), Sandboxes: svc, Policies: ps})
	// A user of its own: one signed in through this app's identity
	// provider is bound to it, and the shared app's ann must keep hers.
	w.Member(t, e.a, "dora@a.test", tenants.RoleDeveloper)
	dora := w.Login(t, "dora@a.test")

	s, page := dora.GetPage(t, "/sandboxes")
	if s != http.StatusOK {
		t.Fatalf("GET /sandboxes = %d", s)
	}
	shown, inputs := createForm(t, page)
	// The policy's defaults, and its bounds within the 2 GiB VM.
	for _, want := range []struct{ name, attr, value string }{
		{"memory_mib", "value", "96"}, {"memory_mib", "max", "384"}, {"timeout_minutes", "value", "30"}, {"timeout_minutes", "max", "120"},
		{"vcpus", "value", "1"}, {"vcpus", "max", "1"},
	} {
		if got := inputs[want.name][want.attr]; got != want.value {
			t.Errorf("Got(create form %s %s) = %q; want %q (tenant policy v%d)", want.name, want.attr, got, want.value, v.Version)
		}
	}

	api := w.WithToken(w.Token(t, e.a, tenants.RoleDeveloper))
	for _, tt := range []struct {
		name string
		form url.Values // nil: through the API, with an empty body
	}{
		{"the form as shown", shown},
		{"sizes left empty", url.Values{"template": {shown.Get("template")}, "vcpus": {"1"}, "memory_mib": {""}, "timeout_minutes": {""}}},
		{"API without sizes", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var id string
			if tt.form == nil {
				var out struct{ ID string }
				if s, body := api.JSON(t, http.MethodPost, "/api/v1/sandboxes", map[string]any{}, &out); s != http.StatusCreated || out.ID == "" {
					t.Fatalf("Got(POST /api/v1/sandboxes {}) = %d %.500s; want 201", s, body)
				}
				id = out.ID
			} else {
				s, body, hdr := dora.Post(t, "/sandboxes", tt.form)
				loc, ok := strings.CutPrefix(hdr.Get("Location"), "/sandboxes/")
				if s != http.StatusSeeOther || !ok {
					t.Fatalf("Got(POST /sandboxes %v) = %d %s %.500s; want 303 to the sandbox", tt.form, s, hdr.Get("Location"), body)
				}
				id = loc
			}
			defer func() {
				if _, err := svc.Destroy(ctx, actor, e.a.ID, id); err != nil {
					t.Errorf("destroy %s: %v", id, err)
				}
			}()
			sb, err := svc.Store().Sandbox(ctx, e.a.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.State != sandbox.StateRunning || sb.MemoryMiB != 96 || sb.TimeoutSeconds != 1800 || sb.PolicyVersion != v.Version {
				t.Errorf("Got(sandbox) = %s, %d MiB, %d s, policy v%d; want running with the policy's 96 MiB and 1800 s (v%d)",
					sb.State, sb.MemoryMiB, sb.TimeoutSeconds, sb.PolicyVersion, v.Version)
			}
		})
	}
}
