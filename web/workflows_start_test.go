package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestWorkflowManualStartPageAndAPI: "Run now" on the page and POST
// /api/v1/workflows/:name/runs are one engine method: the same input is
// refused the same way (the page says it on the workflow's page, the API in
// a problem naming the field) with nothing written, and the same good input
// records the same run.
func TestWorkflowManualStartPageAndAPI(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	tn := env.Tenant(t, "wf-start")
	env.Member(t, tn, "dev@wf-start.test", tenants.RoleDeveloper)
	page := env.Login(t, "dev@wf-start.test")
	api := env.WithToken(env.Token(t, tn, tenants.RoleDeveloper))
	recordRun(t, env, tn.ID, "by-hand", "ann")
	noManual := strings.Replace(apiWorkflow, "  - event: manual\n", "", 1)
	if s, body, _ := env.WithToken(env.Token(t, tn, tenants.RoleAdmin)).Request(t, http.MethodPut, "/api/v1/workflows/api-tests",
		"application/yaml", strings.NewReader(noManual)); s != http.StatusOK {
		t.Fatalf("Got(PUT api-tests without a manual trigger) = %d %s", s, body)
	}
	// start runs workflow name at ref through one door and returns the
	// status and, for the page, the message it shows; id is the new run.
	start := func(door, name, ref string) (status int, says, id string) {
		t.Helper()
		if door == "api" {
			var out struct {
				ID string `json:"id"`
			}
			s, body := api.JSON(t, http.MethodPost, "/api/v1/workflows/"+name+"/runs", map[string]string{"ref": ref}, &out)
			return s, body, out.ID
		}
		s, _, hdr := page.Post(t, "/workflows/"+name+"/runs", url.Values{"ref": {ref}})
		loc := hdr.Get("Location")
		if s != http.StatusSeeOther {
			return s, "", ""
		}
		if id, ok := strings.CutPrefix(loc, "/runs/"); ok {
			return http.StatusCreated, "", id
		}
		_, body := page.GetPage(t, loc)
		return http.StatusUnprocessableEntity, body, ""
	}
	refused := []struct {
		name, workflow, ref string
		status              int
		api, page           string // what each door says
	}{
		{"ref with a newline", "by-hand", "main\nX: y", http.StatusUnprocessableEntity, `"field":"ref"`, "Not started: the ref must be a git ref of at most 255 characters."},
		{"ref too long", "by-hand", strings.Repeat("r", 256), http.StatusUnprocessableEntity, `"field":"ref"`, "Not started: the ref must be a git ref"},
		{"no manual trigger", "api-tests", "main", http.StatusUnprocessableEntity, `"rule":"manual"`, "Not started: workflow api-tests has no manual trigger"},
		{"unknown workflow", "nope", "main", http.StatusNotFound, "", ""},
	}
	for _, door := range []string{"page", "api"} {
		for _, tt := range refused {
			t.Run(door+"/"+tt.name, func(t *testing.T) {
				env.Settled(t) // a run started by an earlier case writes its own rows (outbox) as it goes
				before := env.Counts(t)
				s, says, _ := start(door, tt.workflow, tt.ref)
				want := map[string]string{"api": tt.api, "page": tt.page}[door]
				if s != tt.status || !strings.Contains(says, want) {
					t.Errorf("Got(start %s at %q) = %d saying %.300q; want %d saying %q", tt.workflow, tt.ref, s, says, tt.status, want)
				}
				env.Unchanged(t, before)
			})
		}
		t.Run(door+"/started", func(t *testing.T) {
			s, _, id := start(door, "by-hand", "  release/1.0 ")
			if s != http.StatusCreated || id == "" {
				t.Fatalf("Got(start by-hand) = %d run %q; want the run", s, id)
			}
			r, _, err := env.Runs.Store().Get(t.Context(), tn.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			if r.TriggerKind != runs.TriggerManual || r.Ref != "release/1.0" || r.Sender == "" || r.Trust != "trusted" {
				t.Errorf("Got(run) = trigger %s at %q by %q, trust %s; want manual at release/1.0 by the caller, trusted", r.TriggerKind, r.Ref, r.Sender, r.Trust)
			}
		})
	}
}
