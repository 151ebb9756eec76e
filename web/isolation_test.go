package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestIsolationRoutes: a caller acting in tenant A never reaches tenant B.
// Every route with an object id, asked for B's object, answers not found
// and leaves it alone; every list and page of A shows nothing of B. Built
// from the route table, on SQLite and PostgreSQL.
func TestIsolationRoutes(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { testIsolation(t, d.DB) })
	}
}

type isoTenant struct {
	tenant  tenants.Tenant
	admin   *webtest.Client // admin session acting in this tenant
	token   *webtest.Client // admin API token
	adminID string          // the admin's user id
	markers []string        // strings only this tenant's data contains
}

func testIsolation(t *testing.T, db *gorm.DB) {
	env := webtest.New(t, webtest.Options{DB: db, Operators: []string{"operator@platform.test"}})
	opCaller := &caller{name: "operator", kind: "operator", operator: true, email: "operator@platform.test"}
	opCaller.client = env.Login(t, opCaller.email)
	setup := func(slug, name string) *isoTenant {
		tn := env.TenantNamed(t, slug, name)
		env.Member(t, tn, "admin@"+slug+".test", tenants.RoleAdmin)
		pending := env.Invite(t, tn, "pending@"+slug+".test", tenants.RoleAuditor)
		secret, tok := env.NewToken(t, tn, slug+"-ci", tenants.RoleAdmin)
		it := &isoTenant{tenant: tn, admin: env.Login(t, "admin@"+slug+".test"), token: env.WithToken(secret)}
		_, m := me(t, it.admin)
		it.adminID = m.User.ID
		// Activity of its own, so its audit log has events to leak.
		if s, _ := it.admin.JSON(t, http.MethodPost, "/api/v1/members", map[string]string{"email": "invited@" + slug + ".test", "role": "developer"}, nil); s != http.StatusCreated {
			t.Fatalf("Got(invite in %s) = %d; want 201", slug, s)
		}
		// A sandbox of its own, so its sandbox lists have something to leak.
		sb := sandboxtest.Record(t, env.DB, tn.ID, "admin@"+slug+".test")
		// And a recorded terminal session in it, for its terminal lists.
		ts := terminaltest.Record(t, env.DB, env.Terminals.Config().DataDir, tn.ID, sb.ID, "admin@"+slug+".test")
		// And a secret, for its secret lists.
		secretName := strings.ToUpper(strings.ReplaceAll(slug, "-", "_")) + "_TOKEN"
		if _, err := env.Secrets.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, tn.ID,
			secrets.NewSecret{Name: secretName, Value: "value-of-" + slug, Hosts: []string{"api." + slug + ".test"}}); err != nil {
			t.Fatalf("create secret in %s: %v", slug, err)
		}
		// And a policy version, for its policy pages and versions.
		doc := policy.Defaults()
		doc.Network.Egress.Allow = []policy.Rule{{Domain: "api." + slug + ".test", Ports: []int{443}}}
		if _, err := env.Policies.Save(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, tn.ID,
			policy.Edit{Doc: doc, Reason: "egress for " + slug}); err != nil {
			t.Fatalf("save policy in %s: %v", slug, err)
		}
		// And an egress decision of its sandbox, for the egress lists.
		if err := egress.NewStore(env.DB).Record(context.Background(), &egress.Event{TenantID: tn.ID, SandboxID: sb.ID, Method: "CONNECT",
			Host: "egress." + slug + ".test", Port: 443, Decision: egress.DecisionDeny, Rule: "default deny", StartedAt: time.Now()}); err != nil {
			t.Fatalf("record egress event in %s: %v", slug, err)
		}
		// And a compliance probe run, for its probe lists.
		run := recordProbeRun(t, env.DB, tn.ID, "probe output of "+slug+"\n", nil)
		// And a workflow with a run, and workflow settings, for the
		// workflow and run lists.
		wfRun := recordRun(t, env, tn.ID, "ci", "admin@"+slug+".test")
		if _, err := env.Workflows.SetGitHubSecret(context.Background(), audit.Actor{Kind: audit.ActorUser, Name: "admin@" + slug + ".test"},
			tn.ID, secretName); err != nil {
			t.Fatalf("set workflow settings in %s: %v", slug, err)
		}
		// And a webhook endpoint with a delivery, for the integration lists.
		hook, err := env.Integrations.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, tn.ID,
			integrations.NewEndpoint{URL: "https://hooks." + slug + ".example.com/in", SecretName: secretName})
		if err != nil {
			t.Fatalf("create webhook endpoint in %s: %v", slug, err)
		}
		hookTest, err := env.Integrations.SendTest(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, tn.ID, hook.ID)
		if err != nil {
			t.Fatalf("send test event in %s: %v", slug, err)
		}
		// And a volume, for the volume lists.
		vol, err := env.App.Volumes.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, tn.ID, "volume-of-"+slug, 1)
		if err != nil {
			t.Fatalf("create volume in %s: %v", slug, err)
		}
		tplName := (&fixtures{env: env, tenant: tn}).template(t)
		it.markers = []string{tn.ID, tn.Slug, tn.Name, "@" + slug + ".test", pending.ID, tok.ID, tok.Prefix, it.adminID, sb.ID, ts.ID, secretName, run,
			wfRun, hook.ID, hookTest.ID, hookTest.EventID, vol.ID, tplName}
		return it
	}
	a := setup("alpha-co", "Alpha Company")
	b := setup("bravo-co", "Bravo Company")
	var bEvents []audit.Event
	if err := env.DB.Where("tenant_id = ?", b.tenant.ID).Find(&bEvents).Error; err != nil || len(bEvents) == 0 {
		t.Fatalf("Got(B's audit events) = %d, %v; want some", len(bEvents), err)
	}
	for _, e := range bEvents {
		b.markers = append(b.markers, e.ID)
	}

	// Someone who is admin in both tenants but acts in A reaches B's
	// objects through A no more than A's own admin does.
	env.Member(t, a.tenant, "both@shared.test", tenants.RoleAdmin)
	env.Member(t, b.tenant, "both@shared.test", tenants.RoleAdmin)
	both := env.Login(t, "both@shared.test")
	if s, _, _ := both.Post(t, "/tenant/switch", url.Values{"slug": {a.tenant.Slug}}); s != http.StatusSeeOther {
		t.Fatalf("Got(switch to A) = %d; want 303", s)
	}

	type actor struct {
		name   string
		client *webtest.Client
		api    bool // a token: API routes only
		// shown are B's markers this actor may legitimately see: a member
		// of both tenants finds B in the tenant switcher.
		shown []string
	}
	actors := []actor{
		{name: "A admin session", client: a.admin},
		{name: "A admin token", client: a.token, api: true},
		{name: "admin of A and B, acting in A", client: both, shown: []string{b.tenant.Slug, b.tenant.Name}},
	}
	fa := &fixtures{env: env, tenant: a.tenant}
	fb := &fixtures{env: env, tenant: b.tenant}
	self := &caller{kind: "session", role: tenants.RoleAdmin, tenant: &a.tenant}

	routes := env.App.RouteTable()
	// VM routes need booted VMs, which this harness does not run: their
	// tenant isolation table runs on real VMs in sandbox/vmpool
	// (TestVMs/TenantIsolation). Every other route must be covered here,
	// so a new VM route must be added to vmObjectRoutes by hand.
	coveredElsewhere := func(path string) bool {
		return strings.HasPrefix(path, "/vms/:id") || strings.HasPrefix(path, "/api/v1/vms") || path == "/api/v1/vm-pool"
	}
	vmObjectRoutes := map[string]bool{"POST /vms/:id/stop": true, "POST /vms/:id/destroy": true, "POST /vms/:id/recycle": true,
		"GET /api/v1/vms/:id": true, "DELETE /api/v1/vms/:id": true, "POST /api/v1/vms/:id/stop": true, "POST /api/v1/vms/:id/recycle": true}
	// upserts answer a name of another tenant by creating the caller's own
	// object of that name: not a 404, and B's is left alone.
	upserts := map[string]int{"PUT /api/v1/workflows/:name": http.StatusOK}
	t.Run("lists and pages", func(t *testing.T) {
		for _, r := range routes {
			if r.Method != http.MethodGet || strings.Contains(r.Path, ":") || r.Perm == tenants.PermOperator || r.Perm == tenants.PermPublic || coveredElsewhere(r.Path) {
				continue
			}
			for _, ac := range actors {
				if ac.api && !r.API {
					continue
				}
				t.Run(r.Path+"/"+ac.name, func(t *testing.T) {
					status, body, hdr := ac.client.Request(t, http.MethodGet, r.Path, "", nil)
					if status != http.StatusOK {
						t.Fatalf("Got(status) = %d; want 200: %.300s", status, body)
					}
					for _, m := range b.markers {
						if strings.Contains(body, m) && !slices.Contains(ac.shown, m) {
							t.Errorf("Got(body) contains %q of tenant B; want nothing of B", m)
						}
					}
					// A full page or a JSON answer must show A's data, or the
					// check above proves nothing; an htmx fragment may be empty.
					whole := strings.Contains(body, "<html") || strings.HasPrefix(hdr.Get("Content-Type"), "application/json")
					if r.Perm.TenantScoped() && whole && !containsAny(body, a.markers) {
						t.Errorf("Got(body) contains nothing of tenant A; want A's data (the check would be empty)")
					}
				})
			}
		}
	})

	t.Run("objects", func(t *testing.T) {
		n := 0
		for _, r := range routes {
			key := r.Method + " " + r.Path
			if !strings.Contains(r.Path, ":") || vmObjectRoutes[key] {
				continue
			}
			n++
			if r.Perm == tenants.PermOperator {
				continue // "operator routes" below
			}
			if !r.Perm.TenantScoped() {
				t.Errorf("route %s has a path parameter but no tenant permission: extend this test", key)
				continue
			}
			if _, ok := fa.objectFor(t, r.Path); !ok {
				t.Errorf("route %s has no isolation case: add the kind of its parameters to fixtures.objectFor", key)
				continue
			}
			for _, ac := range actors {
				if ac.api && !r.API {
					continue
				}
				c := &caller{kind: "session", role: tenants.RoleAdmin, tenant: &a.tenant, client: ac.client}
				t.Run(key+"/"+ac.name, func(t *testing.T) {
					t.Run("own tenant", func(t *testing.T) {
						o, _ := fa.objectFor(t, r.Path)
						form, in := fa.input(r, self, o.path)
						status, body, _ := call(t, c, r, o.path, form, in)
						// Found: a success, or what this harness answers
						// without the service behind the route.
						if want, why := harnessStatus(r); want != 0 {
							if status != want {
								t.Errorf("Got(status) = %d; want %d on A's own object (%s): %.300s", status, want, why, body)
							}
						} else if status >= 400 {
							t.Errorf("Got(status) = %d; want success on A's own object: %.300s", status, body)
						}
					})
					t.Run("other tenant", func(t *testing.T) {
						o, _ := fb.objectFor(t, r.Path)
						env.Settled(t) // a run the own-tenant call started ends on its own
						snap := snapshot(t, env, b.tenant.ID, r.Path, o.params)
						before := env.Counts(t)
						form, in := fa.input(r, self, o.path)
						status, body, hdr := call(t, c, r, o.path, form, in)
						if want, ok := upserts[key]; ok {
							fb.wf = "" // A has one of that name now: B's next is another
							if status != want {
								t.Errorf("Got(status) = %d; want %d (A's own object of that name): %.300s", status, want, body)
							}
						} else {
							if status != http.StatusNotFound {
								t.Errorf("Got(status) = %d; want 404 for B's object: %.300s", status, body)
							} else if r.API {
								if p := webtest.Problem(t, hdr, body); p.Status != http.StatusNotFound {
									t.Errorf("Got(problem status) = %d; want 404", p.Status)
								}
							}
							env.Unchanged(t, before)
						}
						if after := snapshot(t, env, b.tenant.ID, r.Path, o.params); !reflect.DeepEqual(after, snap) {
							t.Errorf("Got(B's object after) = %+v; want unchanged %+v", after, snap)
						}
					})
				})
			}
		}
		if n < 40 {
			t.Fatalf("Got(routes with path parameters) = %d; want the whole table's (40 or more)", n)
		}
	})

	// Platform operators act on any tenant by design: there the path's :id
	// is the tenant. Isolation means a tenant's members (admin of A and B
	// included) never reach these routes, and an operator acting on one
	// tenant changes no other.
	t.Run("operator routes", func(t *testing.T) {
		n := 0
		for _, r := range routes {
			if r.Perm != tenants.PermOperator || !strings.Contains(r.Path, ":") {
				continue
			}
			n++
			key := r.Method + " " + r.Path
			if strings.HasPrefix(r.Path, "/operator/vms/:id") {
				// The :id is any tenant's VM: members never reach it; the
				// operator's call on A's VM leaves B alone.
				t.Run(key, func(t *testing.T) {
					path := strings.Replace(r.Path, ":id", fb.vm(t), 1)
					for _, ac := range actors {
						if ac.api && !r.API {
							continue
						}
						c := &caller{kind: "session", role: tenants.RoleAdmin, tenant: &a.tenant, client: ac.client}
						before := env.Counts(t)
						if status, body, _ := call(t, c, r, path, nil, nil); status != http.StatusForbidden {
							t.Errorf("Got(%s on B's VM as %s) = %d; want 403 (operators only): %.300s", key, ac.name, status, body)
						}
						env.Unchanged(t, before)
					}
					snapB := tenantSnapshot(t, env, b.tenant.ID)
					if status, body, _ := call(t, opCaller, r, strings.Replace(r.Path, ":id", fa.vm(t), 1), nil, nil); status >= 400 {
						t.Errorf("Got(%s on A's VM as operator) = %d; want it answered: %.300s", key, status, body)
					}
					if !reflect.DeepEqual(tenantSnapshot(t, env, b.tenant.ID), snapB) {
						t.Errorf("Got(B after %s on A's VM) changed; want it left alone", key)
					}
				})
				continue
			}
			if !strings.Contains(r.Path, "/tenants/:id") {
				t.Errorf("operator route %s has a parameter other than the tenant: extend this test", key)
				continue
			}
			t.Run(key, func(t *testing.T) {
				for _, ac := range actors {
					if ac.api && !r.API {
						continue
					}
					c := &caller{kind: "session", role: tenants.RoleAdmin, tenant: &a.tenant, client: ac.client}
					path := strings.Replace(r.Path, ":id", b.tenant.ID, 1)
					form, in := fa.input(r, self, path)
					before := env.Counts(t)
					if status, body, _ := call(t, c, r, path, form, in); status != http.StatusForbidden {
						t.Errorf("Got(%s on B as %s) = %d; want 403 (operators only): %.300s", key, ac.name, status, body)
					}
					env.Unchanged(t, before)
				}
				// An operator acting on a fresh tenant leaves A and B alone.
				target, _ := fa.object(t, r.Path) // a fresh tenant (frozen for unfreeze)
				path := strings.Replace(r.Path, ":id", target, 1)
				snapA, snapB := tenantSnapshot(t, env, a.tenant.ID), tenantSnapshot(t, env, b.tenant.ID)
				form, in := fa.input(r, opCaller, path)
				if status, body, _ := call(t, opCaller, r, path, form, in); status >= 400 {
					t.Errorf("Got(%s as operator) = %d; want success: %.300s", key, status, body)
				}
				if !reflect.DeepEqual(tenantSnapshot(t, env, a.tenant.ID), snapA) || !reflect.DeepEqual(tenantSnapshot(t, env, b.tenant.ID), snapB) {
					t.Errorf("Got(A or B after %s on another tenant) changed; want them left alone", key)
				}
			})
		}
		if n == 0 {
			t.Fatal("Got(operator routes with a tenant) = 0; want some")
		}
	})

	t.Run("audit of A never shows B", func(t *testing.T) {
		for _, ac := range actors {
			for _, path := range []string{"/api/v1/audit?format=jsonl", "/audit/export?format=jsonl", "/api/v1/audit?format=jsonl&actor=" + b.adminID} {
				if ac.api && !strings.HasPrefix(path, "/api/") {
					continue
				}
				t.Run(ac.name+" "+path, func(t *testing.T) {
					evs := exportedEvents(t, ac.client, path)
					if !strings.Contains(path, "actor=") && len(evs) == 0 {
						t.Fatalf("Got(events) = 0; want A's events")
					}
					for _, e := range evs {
						if e.TenantID != a.tenant.ID {
							t.Errorf("Got(event %s %s tenant) = %q; want only %s", e.ID, e.Type, e.TenantID, a.tenant.ID)
						}
					}
				})
			}
		}
		// The filter itself works: A's admin finds their own events.
		if evs := exportedEvents(t, a.admin, "/api/v1/audit?format=jsonl&actor="+a.adminID); len(evs) == 0 {
			t.Errorf("Got(events by A's admin) = 0; want some (the actor filter must work for the check above to mean anything)")
		}
	})

	t.Run("switch to B is not found", func(t *testing.T) {
		before := env.Counts(t)
		if s, _, _ := a.admin.Post(t, "/tenant/switch", url.Values{"slug": {b.tenant.Slug}}); s != http.StatusNotFound {
			t.Errorf("Got(switch to B) = %d; want 404", s)
		}
		env.Unchanged(t, before)
		if _, m := me(t, a.admin); deref(m.Tenant) != a.tenant.Slug {
			t.Errorf("Got(tenant after) = %s; want %s", deref(m.Tenant), a.tenant.Slug)
		}
	})

	t.Run("A's token acts in A only", func(t *testing.T) {
		s, m := me(t, a.token)
		if s != http.StatusOK || m.Kind != "token" || deref(m.Tenant) != a.tenant.Slug {
			t.Errorf("Got(/api/v1/me of A's token) = %d %+v; want token of %s", s, m, a.tenant.Slug)
		}
		var members struct {
			Members []struct{ ID, Email string } `json:"members"`
		}
		if s, body := a.token.JSON(t, http.MethodGet, "/api/v1/members", nil, &members); s != http.StatusOK || len(members.Members) == 0 {
			t.Fatalf("Got(A's members) = %d %s; want a list", s, body)
		}
		for _, mem := range members.Members {
			if !strings.HasSuffix(mem.Email, "@alpha-co.test") && mem.Email != "both@shared.test" {
				t.Errorf("Got(member of A) = %s; want only A's", mem.Email)
			}
		}
	})
}

// snapshot reads the objects of tenant behind a route's parameters.
func snapshot(t *testing.T, env *webtest.Env, tenantID, path string, params map[string]string) any {
	t.Helper()
	id := params[":id"]
	rows := func(table, where string, args ...any) []map[string]any {
		var out []map[string]any
		if err := env.DB.Table(table).Where(where, args...).Order("1").Find(&out).Error; err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		return out
	}
	switch {
	case strings.Contains(path, "/artifacts/"):
		return runSnapshot(t, env, params[":run"])
	case strings.Contains(path, "/policy/versions/"):
		return rows("policies", "tenant_id = ?", tenantID)
	case strings.Contains(path, "/secrets/"):
		return rows("secrets", "tenant_id = ? AND name = ?", tenantID, params[":name"])
	case strings.Contains(path, "/templates/:name/builds"):
		return rows("template_builds", "tenant_id = ? AND template_name = ?", tenantID, params[":name"])
	case strings.Contains(path, "/templates/") && !strings.Contains(path, "/builds"):
		return struct{ Templates, Versions []map[string]any }{rows("templates", "tenant_id = ? AND name = ?", tenantID, params[":name"]),
			rows("template_versions", "tenant_id = ? AND name = ?", tenantID, params[":name"])}
	case strings.Contains(path, "/volumes/"):
		return rows("volumes", "tenant_id = ? AND name = ?", tenantID, params[":name"])
	case strings.Contains(path, "/workflows/"):
		return struct{ Workflow, Runs []map[string]any }{rows("workflows", "tenant_id = ? AND name = ?", tenantID, params[":name"]),
			rows("workflow_runs", "tenant_id = ? AND workflow = ?", tenantID, params[":name"])}
	case strings.Contains(path, "/members/"):
		return env.Membership(t, id)
	case strings.Contains(path, "/tokens/"):
		return env.APIToken(t, id)
	case strings.Contains(path, "/previews"):
		return rows("sandbox_preview_links", "sandbox_id = ?", id)
	case strings.Contains(path, "/sandboxes/"):
		var sb sandbox.Sandbox
		if err := env.DB.Take(&sb, "id = ?", id).Error; err != nil {
			t.Fatalf("read sandbox %s: %v", id, err)
		}
		return struct {
			Sandbox                  sandbox.Sandbox
			Events, Execs, Processes []map[string]any
		}{sb, rows("sandbox_events", "sandbox_id = ?", id), rows("sandbox_execs", "sandbox_id = ?", id), rows("processes", "sandbox_id = ?", id)}
	case strings.Contains(path, "/terminals/"):
		var s terminal.Session
		if err := env.DB.Take(&s, "id = ?", id).Error; err != nil {
			t.Fatalf("read terminal session %s: %v", id, err)
		}
		return s
	case strings.Contains(path, "/runs/"):
		return runSnapshot(t, env, id)
	case strings.Contains(path, "/integrations/"):
		var ep integrations.Endpoint
		if err := env.DB.Take(&ep, "id = ?", id).Error; err != nil {
			t.Fatalf("read webhook endpoint %s: %v", id, err)
		}
		var deliveries int64
		env.DB.Model(&integrations.Delivery{}).Where("endpoint_id = ?", id).Count(&deliveries)
		return struct {
			Endpoint   integrations.Endpoint
			Deliveries int64
		}{ep, deliveries}
	case strings.Contains(path, "/compliance/probes/"):
		row := map[string]any{}
		if err := env.DB.Table("probe_runs").Where("id = ?", id).Take(&row).Error; err != nil {
			t.Fatalf("read probe run %s: %v", id, err)
		}
		return row
	}
	t.Fatalf("no snapshot for %s", path)
	return nil
}

// tenantSnapshot reads what an operator route may change of a tenant: its
// row (freeze), its quota and its sandboxes.
func tenantSnapshot(t *testing.T, env *webtest.Env, tenantID string) any {
	t.Helper()
	read := func(table, where string) []map[string]any {
		var out []map[string]any
		if err := env.DB.Table(table).Where(where, tenantID).Order("1").Find(&out).Error; err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		return out
	}
	return [][]map[string]any{read("tenants", "id = ?"), read("tenant_quotas", "tenant_id = ?"), read("sandboxes", "tenant_id = ?")}
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// exportedEvents reads a JSONL audit export.
func exportedEvents(t *testing.T, c *webtest.Client, path string) []audit.Event {
	t.Helper()
	status, body, hdr := c.Request(t, http.MethodGet, path, "", nil)
	if status != http.StatusOK || hdr.Get("Content-Type") != "application/jsonl" {
		t.Fatalf("Got(GET %s) = %d %s; want 200 application/jsonl: %.300s", path, status, hdr.Get("Content-Type"), body)
	}
	var out []audit.Event
	for i, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if line == "" {
			continue
		}
		var e audit.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %d of %s: %v: %s", i+1, path, err, line)
		}
		out = append(out, e)
	}
	return out
}
