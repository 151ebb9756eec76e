package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe/recipetest"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/webtest"
)

// caller is one kind of client of the role table.
type caller struct {
	name     string
	kind     string // anonymous, operator, session, token
	role     tenants.Role
	tenant   *tenants.Tenant // the tenant it acts in; nil for none
	operator bool
	email    string // session callers: who signs in again after a logout
	client   *webtest.Client
}

// allowed is what the route table and tenants.Can declare for c.
func (c *caller) allowed(r web.Route) bool {
	switch r.Perm {
	case tenants.PermPublic:
		return true
	case tenants.PermSignedIn:
		return c.kind != "anonymous"
	case tenants.PermOperator:
		return c.operator
	}
	return c.tenant != nil && tenants.Can(c.role, r.Perm)
}

// fixtures makes the objects a route's :id needs, fresh for every request
// so that one caller's delete never changes what the next one sees.
type fixtures struct {
	env    *webtest.Env
	tenant tenants.Tenant
	n      int
	wf     string // a workflow of the tenant, reused (a tenant has at most 100)
	vol    string // a volume of the tenant, reused (the volume quota)
	vmHost bool   // the host row VM fixtures name exists
}

func (f *fixtures) next() int { f.n++; return f.n }

// object returns a real object id of f.tenant for the :id of route path;
// ok is false for a kind of object this test does not know yet.
func (f *fixtures) object(t *testing.T, path string) (id string, ok bool) {
	t.Helper()
	switch {
	case strings.Contains(path, "/members/:id"):
		return f.env.Invite(t, f.tenant, fmt.Sprintf("object%d@%s.test", f.next(), f.tenant.Slug), tenants.RoleDeveloper).ID, true
	case strings.Contains(path, "/tokens/:id"):
		_, tok := f.env.NewToken(t, f.tenant, fmt.Sprintf("object-%d", f.next()), tenants.RoleDeveloper)
		return tok.ID, true
	case strings.Contains(path, "/sandboxes/:id"):
		return sandboxtest.Record(t, f.env.DB, f.tenant.ID, fmt.Sprintf("object%d@%s.test", f.next(), f.tenant.Slug)).ID, true
	case strings.Contains(path, "/compliance/probes/:id"):
		return recordProbeRun(t, f.env.DB, f.tenant.ID, fmt.Sprintf("probe output %d of %s\n", f.next(), f.tenant.Slug), nil), true
	case strings.Contains(path, "/terminals/:id"):
		by := fmt.Sprintf("object%d@%s.test", f.next(), f.tenant.Slug)
		sb := sandboxtest.Record(t, f.env.DB, f.tenant.ID, by)
		return terminaltest.Record(t, f.env.DB, f.env.Terminals.Config().DataDir, f.tenant.ID, sb.ID, by).ID, true
	case strings.Contains(path, "/integrations/:id"), strings.Contains(path, "/integrations/webhooks/:id"):
		// Written directly and disabled: the store caps enabled endpoints
		// per tenant, and this table makes one per caller and route.
		n, now := f.next(), time.Now().UTC()
		ep := integrations.Endpoint{ID: fmt.Sprintf("01900000-0000-7000-8000-%012d", n), TenantID: f.tenant.ID,
			URL: fmt.Sprintf("https://hooks-%d.%s.example.com/in", n, f.tenant.Slug), SecretName: "HOOK_KEY", EventTypesJSON: "[]",
			Enabled: false, CreatedAt: now, UpdatedAt: now}
		if err := f.env.DB.Create(&ep).Error; err != nil {
			t.Fatalf("create webhook endpoint: %v", err)
		}
		return ep.ID, true
	case strings.Contains(path, "/tenants/:id"):
		// Platform operator routes: the object is a tenant, fresh (frozen
		// for the unfreeze routes).
		tn := f.env.Tenant(t, fmt.Sprintf("object-tenant-%d", f.next()))
		if strings.HasSuffix(path, "/unfreeze") {
			if _, err := f.env.Store.FreezeTenant(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, tn.ID, "fixture"); err != nil {
				t.Fatalf("freeze tenant: %v", err)
			}
		}
		return tn.ID, true
	case strings.Contains(path, "/vms/:id"):
		return f.vm(t), true
	case strings.Contains(path, "/runs/:id"):
		n := f.next()
		return recordRun(t, f.env, f.tenant.ID, "runs-fixture", fmt.Sprintf("object%d@%s.test", n, f.tenant.Slug)), true
	}
	return "", false
}

// paramRE matches a path parameter of a route template.
var paramRE = regexp.MustCompile(`:[A-Za-z_]+`)

// routeObject is a real object of a tenant behind a route's parameters.
type routeObject struct {
	path   string            // the route path, its parameters filled
	params map[string]string // ":id" -> the value
}

// objectFor makes, fresh, the objects of f.tenant that the parameters of
// route path name; ok is false for a kind this test does not know yet.
func (f *fixtures) objectFor(t *testing.T, path string) (o routeObject, ok bool) {
	t.Helper()
	o.params = map[string]string{}
	switch {
	case strings.Contains(path, "/sandboxes/:id/execs/:exec_id"):
		sb, exec := f.exec(t)
		o.params[":id"], o.params[":exec_id"] = sb, exec
	case strings.Contains(path, "/sandboxes/:id/processes/:pid"):
		// An ended process: reads answer, changes are refused (409).
		sb := sandboxtest.Record(t, f.env.DB, f.tenant.ID, fmt.Sprintf("object%d@%s.test", f.next(), f.tenant.Slug))
		o.params[":id"], o.params[":pid"] = sb.ID, "42"
		sandboxtest.RecordProcess(t, f.env.DB, f.tenant.ID, sb.ID, 42, sandbox.ProcessExited)
	case strings.HasPrefix(path, "/runs/:run/artifacts/:index"):
		o.params[":run"], o.params[":index"] = f.runWithArtifact(t), "0"
	case strings.Contains(path, "/policy/versions/:version"):
		o.params[":version"] = strconv.Itoa(f.policyVersion(t))
	case strings.Contains(path, "/secrets/:name"):
		o.params[":name"] = f.secret(t)
	case strings.Contains(path, "/workflows/:name"):
		o.params[":name"] = f.workflow(t)
	case strings.Contains(path, "/templates/:name") && !strings.Contains(path, "/builds"):
		o.params[":name"] = f.template(t)
	case strings.Contains(path, "/volumes/:name"):
		o.params[":name"] = f.volume(t)
	case strings.Contains(path, "/sandboxes/:id/previews/:preview_id"):
		o.params[":id"], o.params[":preview_id"] = f.previewLink(t)
	case strings.Contains(path, "/sandboxes/:id/ports/:port"):
		id, _ := f.object(t, "/sandboxes/:id")
		o.params[":id"], o.params[":port"] = id, "8000"
	case strings.Contains(path, "/templates/:name/builds"):
		b := recipetest.Record(t, f.env.DB, f.tenant.ID, fmt.Sprintf("built%d", f.next()), "builder@"+f.tenant.Slug+".test")
		o.params[":name"], o.params[":id"] = b.TemplateName, b.ID
	case strings.Contains(path, ":id"):
		id, ok := f.object(t, path)
		if !ok {
			return o, false
		}
		o.params[":id"] = id
	}
	for _, p := range paramRE.FindAllString(path, -1) {
		if _, ok := o.params[p]; !ok {
			return o, false
		}
	}
	o.path = paramRE.ReplaceAllStringFunc(path, func(p string) string { return o.params[p] })
	return o, true
}

// exec records a running sandbox of f.tenant with a command still running
// in it (as the server knows it; no VM here).
func (f *fixtures) exec(t *testing.T) (sandboxID, execID string) {
	t.Helper()
	n := f.next()
	by := fmt.Sprintf("object%d@%s.test", n, f.tenant.Slug)
	sb := sandboxtest.Record(t, f.env.DB, f.tenant.ID, by)
	rec := sandbox.ExecRecord{ID: uuid.Must(uuid.NewV7()).String(), SandboxID: sb.ID, TenantID: f.tenant.ID, ArgvJSON: `["sleep","600"]`,
		Actor: by, StartedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := f.env.DB.Create(&rec).Error; err != nil {
		t.Fatalf("record command: %v", err)
	}
	return sb.ID, rec.ID
}

// runWithArtifact records an ended run of f.tenant with one kept artifact.
func (f *fixtures) runWithArtifact(t *testing.T) string {
	t.Helper()
	n := f.next()
	id := recordRun(t, f.env, f.tenant.ID, "artifact-fixture", fmt.Sprintf("object%d@%s.test", n, f.tenant.Slug))
	body := fmt.Sprintf("report %d of %s\n", n, f.tenant.Slug)
	arts, _ := json.Marshal([]runs.Artifact{{Path: "out/report.txt", Size: int64(len(body))}})
	now := time.Now().UTC()
	if err := f.env.DB.Model(&runs.Run{}).Where("id = ?", id).
		Updates(map[string]any{"state": runs.StateSucceeded, "artifacts": string(arts), "started_at": now, "ended_at": now}).Error; err != nil {
		t.Fatalf("record artifact of run %s: %v", id, err)
	}
	r, _, err := f.env.Runs.Store().Get(context.Background(), f.tenant.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	p := f.env.Runs.ArtifactPath(r, 0, "out/report.txt")
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
		t.Fatal(err)
	}
	return id
}

// policyVersion saves policy versions in f.tenant until its newest is a
// version number no other tenant has, and returns it.
func (f *fixtures) policyVersion(t *testing.T) int {
	t.Helper()
	var others int
	if err := f.env.DB.Raw("SELECT COALESCE(MAX(version), 0) FROM policies WHERE tenant_id <> ?", f.tenant.ID).Scan(&others).Error; err != nil {
		t.Fatal(err)
	}
	for {
		cur, err := f.env.Policies.Current(context.Background(), f.tenant.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.Version > others {
			return cur.Version
		}
		doc := cur.Doc
		doc.Resources.MaxPids = 200 + f.next()
		if _, err := f.env.Policies.Save(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, f.tenant.ID,
			policy.Edit{Doc: doc, Reason: "fixture"}); err != nil {
			t.Fatalf("save policy version: %v", err)
		}
	}
}

// uniqueName is a name no other tenant's fixture has, carrying nothing of
// the tenant (its lists are searched for the other tenant's names).
func uniqueName() string { return strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")[20:] }

// secret makes a live secret of f.tenant and returns its name.
func (f *fixtures) secret(t *testing.T) string {
	t.Helper()
	name := "OBJECT_" + strings.ToUpper(uniqueName())
	if _, err := f.env.Secrets.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, f.tenant.ID,
		secrets.NewSecret{Name: name, Value: "value of " + name, Hosts: []string{"api." + f.tenant.Slug + ".test"}}); err != nil {
		t.Fatalf("create secret %s: %v", name, err)
	}
	return name
}

// template makes a ready tenant template of f.tenant (a tiny tree packed
// for real; no VM needed to list or delete it).
func (f *fixtures) template(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := "tpl-" + uniqueName()
	if len(name) > 32 {
		name = name[:32]
	}
	v, err := f.env.App.Templates.Begin(ctx, f.tenant.ID, templates.Begin{Name: name, Source: templates.SourceRecipe, CreatedBy: "test"})
	if err != nil {
		t.Fatalf("begin template %s: %v", name, err)
	}
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "hello.txt"), []byte(name), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.App.Templates.Finish(ctx, f.tenant.ID, v.ID, tree, templates.Defaults{}); err != nil {
		t.Fatalf("finish template %s: %v", name, err)
	}
	return name
}

// workflow returns a manual workflow of f.tenant, saved anew when the last
// one was deleted.
func (f *fixtures) workflow(t *testing.T) string {
	t.Helper()
	if f.wf != "" {
		if _, err := f.env.Workflows.Current(context.Background(), f.tenant.ID, f.wf); err == nil {
			return f.wf
		}
	}
	name := "object-" + uniqueName()
	src := fmt.Sprintf("name: %s\ntriggers:\n  - event: manual\nsteps:\n  - name: test\n    run: \"true\"\n", name)
	if _, err := f.env.Workflows.Save(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, f.tenant.ID, []byte(src), nil); err != nil {
		t.Fatalf("save workflow %s: %v", name, err)
	}
	f.wf = name
	return name
}

// volume returns a volume of f.tenant, made anew when the last one was
// deleted.
func (f *fixtures) volume(t *testing.T) string {
	t.Helper()
	if f.vol != "" {
		if _, err := f.env.App.Volumes.Get(context.Background(), f.tenant.ID, f.vol); err == nil {
			return f.vol
		}
	}
	name := "object-" + uniqueName()
	if _, err := f.env.App.Volumes.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, f.tenant.ID, name, 1); err != nil {
		t.Fatalf("create volume %s: %v", name, err)
	}
	f.vol = name
	return name
}

// vm records a booting VM of f.tenant's pool (no libvirt behind it).
func (f *fixtures) vm(t *testing.T) string {
	t.Helper()
	ctx, sys := context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}
	vms := vmpool.NewStore(f.env.DB, nil)
	if !f.vmHost {
		if err := f.env.DB.FirstOrCreate(&vmpool.Host{URI: "test:///fixture", Health: vmpool.HealthOK, CPUs: 4}).Error; err != nil {
			t.Fatalf("record host: %v", err)
		}
		if _, err := f.env.Store.SetQuota(ctx, sys, f.tenant.ID, tenants.Quota{MaxVMs: 100, MaxVCPUs: 100, MaxMemoryMiB: 100 * 1024,
			MaxSandboxes: 100, MaxCPUHoursMonthly: 1000, MaxTemplateMiB: 10240, MaxVolumeGiB: 100}); err != nil {
			t.Fatalf("set quota: %v", err)
		}
		if _, err := vms.SetPool(ctx, sys, f.tenant.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 256, MaxVMs: 100}); err != nil {
			t.Fatalf("set pool: %v", err)
		}
		f.vmHost = true
	}
	vm, err := vms.CreateVM(ctx, sys, f.tenant.ID, vmpool.NewVM{HostURI: "test:///fixture", ImageVersion: "fixture"})
	if err != nil {
		t.Fatalf("record vm: %v", err)
	}
	return vm.ID
}

// fill replaces the path parameters of a route template with real objects
// of f.tenant where this test knows the kind, else with a well-formed id
// that exists nowhere (authorization comes before lookup).
func (f *fixtures) fill(t *testing.T, path string) (filled string, real bool) {
	t.Helper()
	if o, ok := f.objectFor(t, path); ok {
		return o.path, true
	}
	return paramRE.ReplaceAllString(path, missingID), !strings.Contains(path, ":")
}

// missingID is a well-formed id of no object.
const missingID = "01900000-0000-7000-8000-000000000000"

// input is a valid body for the routes that take one, so an allowed call
// does its real work; routes without an entry get an empty body, which is
// enough to test authorization.
func (f *fixtures) input(r web.Route, c *caller, path string) (form url.Values, jsonBody any) {
	n := f.next()
	switch r.Method + " " + r.Path {
	case "POST /tenant/switch":
		slug := "no-tenant"
		if c.tenant != nil {
			slug = c.tenant.Slug
		}
		return url.Values{"slug": {slug}}, nil
	case "POST /settings/members":
		return url.Values{"email": {fmt.Sprintf("form%d@%s.test", n, f.tenant.Slug)}, "role": {"developer"}}, nil
	case "POST /operator/tenants/:id/freeze":
		return url.Values{"reason": {"fixture"}}, nil
	case "POST /settings/members/:id/role":
		return url.Values{"role": {"manager"}}, nil
	case "POST /settings/tokens":
		return url.Values{"name": {fmt.Sprintf("form-token-%d", n)}, "role": {tokenRole(c)}, "ttl": {"30d"}}, nil
	case "POST /settings/secrets":
		return url.Values{"name": {fmt.Sprintf("FORM_SECRET_%d", n)}, "value": {"v"}, "hosts": {"api.example.com"}, "ttl": {"7d"}, "inject": {"authorization"}}, nil
	case "POST /settings/secrets/:name/inject":
		return url.Values{"inject": {"authorization"}}, nil
	case "POST /settings/integrations":
		// The form's signing secret is one of the tenant's live secrets.
		if _, err := f.env.Secrets.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, f.tenant.ID,
			secrets.NewSecret{Name: "HOOK_KEY", Value: "whsec_x", Hosts: []string{"example.com"}}); err != nil && !errdefs.IsConflict(err) {
			return nil, nil // the call fails and says so
		}
		return url.Values{"url": {fmt.Sprintf("https://form-%d.example.com/in", n)}, "secret_name": {"HOOK_KEY"}}, nil
	case "POST /api/v1/integrations/webhooks":
		return nil, map[string]any{"url": fmt.Sprintf("https://api-%d.example.com/in", n), "secret_name": "HOOK_KEY"}
	case "PATCH /api/v1/integrations/webhooks/:id":
		return nil, map[string]any{"enabled": false}
	case "POST /sandboxes/:id/previews":
		return url.Values{"port": {"8000"}, "ttl_minutes": {"10"}}, nil
	case "POST /api/v1/sandboxes/:id/previews":
		return nil, map[string]any{"port": 8000, "ttl_seconds": 600}
	case "POST /api/v1/secrets":
		return nil, map[string]any{"name": fmt.Sprintf("API_SECRET_%d", n), "value": "v", "hosts": []string{"api.example.com"}}
	case "POST /volumes":
		return url.Values{"name": {fmt.Sprintf("form-volume-%d", n)}, "size_gib": {"1"}}, nil
	case "POST /volumes/:name/resize":
		return url.Values{"size_gib": {"2"}}, nil
	case "POST /api/v1/templates":
		return nil, map[string]any{"apiVersion": "stockade.dev/template/v1", "name": fmt.Sprintf("recipe-%d", n), "base": "debian"}
	case "POST /templates/build":
		return url.Values{"recipe": {fmt.Sprintf("apiVersion: stockade.dev/template/v1\nname: form-recipe-%d\nbase: debian\n", n)}}, nil
	case "POST /api/v1/volumes":
		return nil, map[string]any{"name": fmt.Sprintf("api-volume-%d", n), "size_gib": 1}
	case "PATCH /api/v1/volumes/:name":
		return nil, map[string]any{"size_gib": 2}
	case "POST /vms/pool":
		// Within the default quota, no warm VM: nothing boots.
		return url.Values{"vcpus": {"1"}, "memory_mib": {"1024"}, "max_vms": {"1"}, "warm_vms": {"0"}, "recycle_after_hours": {"24"}}, nil
	case "PUT /api/v1/vm-pool":
		return nil, map[string]any{"vcpus": 1, "memory_mib": 1024, "max_vms": 1, "warm_vms": 0, "recycle_after_hours": 24}
	case "POST /policy", "POST /policy/raw", "PUT /api/v1/policy", "POST /api/v1/policy/preview":
		// A document that differs from the current one, on the current
		// version, so an allowed call saves a new version.
		cur, err := f.env.Policies.Current(context.Background(), f.tenant.ID)
		if err != nil {
			return nil, nil // the call fails and says so
		}
		doc := cur.Doc
		doc.Resources.MaxPids = 100 + n
		base, reason := strconv.Itoa(cur.Version), fmt.Sprintf("role table %d", n)
		switch r.Path {
		case "/policy":
			rs := doc.Resources
			return url.Values{"section": {"resources"}, "base_version": {base}, "op": {"save"}, "reason": {reason},
				"/resources/max_vcpus": {strconv.Itoa(rs.MaxVCPUs)}, "/resources/max_memory_mib": {strconv.Itoa(rs.MaxMemoryMiB)},
				"/resources/default_memory_mib": {strconv.Itoa(rs.DefaultMemoryMiB)}, "/resources/max_pids": {strconv.Itoa(rs.MaxPids)},
				"/resources/max_disk_mib": {strconv.Itoa(rs.MaxDiskMiB)}}, nil
		case "/policy/raw":
			raw, _ := json.Marshal(doc)
			return url.Values{"doc": {string(raw)}, "base_version": {base}, "op": {"save"}, "reason": {reason}}, nil
		}
		return nil, map[string]any{"policy": doc, "reason": reason}
	case "POST /policy/rollback":
		// The confirm step's form: on the version in force, so an allowed
		// call saves a new version.
		cur, err := f.env.Policies.Current(context.Background(), f.tenant.ID)
		if err != nil {
			return nil, nil // the call fails and says so
		}
		return url.Values{"version": {"0"}, "reason": {"role table"}, "op": {"rollback"}, "base_version": {strconv.Itoa(cur.Version)}}, nil
	case "POST /api/v1/policy/rollback":
		return nil, map[string]any{"version": 0, "reason": "role table"}
	case "POST /operator/tenants":
		return url.Values{"slug": {fmt.Sprintf("form-tenant-%d", n)}, "name": {"Form tenant"}}, nil
	case "POST /api/v1/members":
		return nil, map[string]string{"email": fmt.Sprintf("api%d@%s.test", n, f.tenant.Slug), "role": "auditor"}
	case "PATCH /api/v1/members/:id":
		return nil, map[string]string{"role": "billing"}
	case "POST /api/v1/tokens":
		return nil, map[string]string{"name": fmt.Sprintf("api-token-%d", n), "role": tokenRole(c), "ttl": "24h"}
	case "POST /api/v1/tenants":
		return nil, map[string]string{"slug": fmt.Sprintf("api-tenant-%d", n)}
	case "POST /operator/prices":
		return url.Values{"currency": {"USD"}, "vcpu_second": {"0.00002"}, "gib_second": {"0.000005"}, "cpu_second": {"0"}, "egress_gb": {"0.05"}}, nil
	case "POST /api/v1/prices":
		return nil, map[string]any{"currency": "USD", "vcpu_second": 0.00002, "gib_second": 0.000005, "cpu_second": 0, "egress_gb": 0.05}
	case "PUT /api/v1/workflows/:name":
		// The document names the workflow of the path: a new version of
		// it (a new description each time, so never "unchanged").
		return nil, map[string]any{"name": path[strings.LastIndexByte(path, '/')+1:], "description": fmt.Sprintf("role table %d", n),
			"triggers": []map[string]string{{"event": "manual"}}, "steps": []map[string]string{{"name": "s", "run": "true"}}}
	case "POST /workflows":
		// The editor's form: a new workflow, so an allowed call saves it.
		return url.Values{"name": {""}, "base_version": {"0"}, "source": {fmt.Sprintf(
			"name: form-workflow-%d\ntriggers:\n  - event: manual\nsteps:\n  - name: s\n    run: \"true\"\n", n)}}, nil
	case "POST /operator/tenants/:id/quota":
		return url.Values{tenants.QuotaMaxSandboxes: {"16"}, tenants.QuotaMaxVCPUs: {"8"}, tenants.QuotaMaxMemoryMiB: {"8192"},
			tenants.QuotaMaxVMs: {"4"}, tenants.QuotaMaxCPUHoursMonthly: {"1000"}}, nil
	case "POST /api/v1/sandboxes/:id/processes":
		return nil, map[string]any{"cmd": []string{"sleep", "1"}}
	case "POST /api/v1/sandboxes/:id/processes/:pid/stdin":
		return nil, map[string]string{"data": "x\n"}
	case "POST /api/v1/sandboxes/:id/processes/:pid/signal":
		return nil, map[string]string{"signal": "SIGTERM"}
	case "POST /api/v1/sandboxes/:id/processes/:pid/resize":
		return nil, map[string]int{"cols": 100, "rows": 30}
	case "POST /api/v1/sandboxes/:id/timeout":
		return nil, map[string]int{"timeout_seconds": 600}
	case "PUT /api/v1/tenants/:id/quota":
		return nil, map[string]int{"max_vms": 4, "max_vcpus": 8, "max_memory_mib": 8192, "max_sandboxes": 16, "max_cpu_hours_monthly": 1000}
	}
	return nil, nil
}

// tokenRole is a token role c may make: its own (tokens are capped at it).
func tokenRole(c *caller) string {
	if c.role == "" {
		return string(tenants.RoleDeveloper)
	}
	return string(c.role)
}

// handlerStatus is the status an allowed call gets from the handler itself
// when that is not a success, with the reason.
func handlerStatus(r web.Route, c *caller) (int, string) {
	switch {
	case r.Method == http.MethodGet && r.Path == "/auth/callback":
		return http.StatusUnauthorized, "no login in flight: the relying party refuses the callback"
	case r.Path == "/tenant/switch" && c.tenant == nil:
		return http.StatusNotFound, "the caller is a member of no tenant"
	case strings.Contains(r.Path, "/tokens/:id") && !tenants.Can(c.role, tenants.PermTokensWrite):
		return http.StatusNotFound, "the fixture token is not the caller's: without tokens.write another's token is not found"
	case terminalSocket(r) && !tenants.Can(c.role, tenants.PermTerminalsDrive):
		return http.StatusForbidden, "the role may watch (?watch=1), not open a terminal: that needs terminals.drive"
	}
	return 0, ""
}

// harnessStatus is the answer an allowed call of r gets in this harness
// when the route cannot succeed here, and why; 0 when it must succeed.
// Only these routes may answer an allowed caller with a failure.
func harnessStatus(r web.Route) (int, string) {
	switch r.Method + " " + r.Path {
	case "POST /sandboxes", "POST /api/v1/sandboxes":
		return http.StatusServiceUnavailable, "a sandbox starts in a tenant VM: this harness runs no VM pools"
	case "DELETE /api/v1/sandboxes/:id", "POST /api/v1/sandboxes/:id/exec", "GET /api/v1/sandboxes/:id/execs/:exec_id/stream",
		"GET /api/v1/sandboxes/:id/files", "PUT /api/v1/sandboxes/:id/files", "GET /api/v1/sandboxes/:id/terminal",
		"POST /api/v1/sandboxes/:id/files", "DELETE /api/v1/sandboxes/:id/files", "GET /api/v1/sandboxes/:id/files/stat",
		"GET /api/v1/sandboxes/:id/files/list", "POST /api/v1/sandboxes/:id/files/mkdir", "POST /api/v1/sandboxes/:id/files/move",
		"POST /api/v1/sandboxes/:id/files/chmod", "GET /api/v1/sandboxes/:id/files/watch", "GET /api/v1/sandboxes/:id/files/archive":
		return http.StatusServiceUnavailable, "found, then the sandbox's VM agent is out of reach: this harness runs no VM pools"
	case "POST /api/v1/sandboxes/:id/processes", "POST /api/v1/sandboxes/:id/timeout":
		return http.StatusServiceUnavailable, "found, then the sandbox's VM agent is out of reach: this harness runs no VM pools"
	case "POST /api/v1/sandboxes/:id/processes/:pid/stdin", "POST /api/v1/sandboxes/:id/processes/:pid/stdin/close",
		"POST /api/v1/sandboxes/:id/processes/:pid/signal", "POST /api/v1/sandboxes/:id/processes/:pid/resize":
		return http.StatusConflict, "found, then the fixture process has ended: only a running one takes input, signals or a size (sandbox tests them on real VMs)"
	case "GET " + web.PortProxyPath, "POST " + web.PortProxyPath, "PUT " + web.PortProxyPath,
		"PATCH " + web.PortProxyPath, "DELETE " + web.PortProxyPath, "OPTIONS " + web.PortProxyPath:
		return http.StatusServiceUnavailable, "found, then the sandbox's VM agent is out of reach: this harness runs no VM pools (TestPortsVM tunnels on a real VM)"
	case "POST /api/v1/templates/import", "POST /templates/import":
		return http.StatusUnprocessableEntity, "found; the harness sends no image (an image is required): sandbox/templates/oci and web/template_import_test.go import real ones"
	case "GET /sandboxes/:id/ports/open":
		return http.StatusUnprocessableEntity, "found; no ?port= asked, so the page says the port is missing"
	case "POST /api/v1/sandboxes/:id/pause", "POST /api/v1/sandboxes/:id/resume":
		return http.StatusServiceUnavailable, "found, then pause and resume need the sandbox's VM agent: this harness runs no VM pools (sandbox/pause_vm_test.go runs them on a real VM)"
	case "POST /api/v1/operator/hosts", "POST /api/v1/operator/hosts/cordon", "POST /api/v1/operator/hosts/uncordon",
		"POST /api/v1/operator/hosts/drain", "POST /api/v1/operator/hosts/remove":
		return http.StatusServiceUnavailable, "a host is connected to, and its VMs moved, by the VM pools: this harness starts none (sandbox/vmpool hosts tests run them on two libvirtds)"
	case "POST /api/v1/templates", "POST /templates/build":
		return http.StatusUnprocessableEntity, "a valid recipe, checked up to its base: this harness builds no template images (sandbox/templates/recipe builds on the real debian image)"
	case "POST /api/v1/vms", "DELETE /api/v1/vms/:id":
		return http.StatusServiceUnavailable, "a VM is started or destroyed through libvirt: this harness starts no VM pools (sandbox/vmpool tests the API on real VMs)"
	case "POST /api/v1/vms/:id/stop", "POST /api/v1/vms/:id/recycle":
		return http.StatusConflict, "the fixture VM is booting: only a running VM stops or recycles (sandbox/vmpool tests them on real VMs)"
	}
	return 0, ""
}

// handlerAnswers reports whether handlerStatus has its own answer for c.
func handlerAnswers(r web.Route, c *caller) bool { s, _ := handlerStatus(r, c); return s != 0 }

// call sends r as c to path (its parameters filled).
func call(t *testing.T, c *caller, r web.Route, path string, form url.Values, in any) (int, string, http.Header) {
	t.Helper()
	cl := c.client
	switch {
	case terminalSocket(r):
		return wsHandshake(t, cl, path)
	case r.Method == http.MethodGet:
		return cl.Request(t, r.Method, path, "", nil)
	case !r.API:
		if form == nil {
			form = url.Values{}
		}
		if cl.Bearer == "" {
			form.Set("_csrf", cl.CSRF(t))
		}
		// Past the confirm step of destructive forms (TestConfirmStep
		// tests it), so the call does its work.
		if form.Get("confirm") == "" {
			form.Set("confirm", "yes")
		}
		return cl.Request(t, r.Method, path, "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	}
	var hdr []string
	if cl.Bearer == "" {
		hdr = []string{"X-CSRF-Token", cl.CSRF(t)}
	}
	body := "{}"
	if in != nil {
		b, _ := json.Marshal(in)
		body = string(b)
	}
	return cl.Request(t, r.Method, path, "application/json", strings.NewReader(body), hdr...)
}

// terminalSocket is the terminal WebSocket route: it is called with a
// real handshake.
func terminalSocket(r web.Route) bool { return r.API && strings.HasSuffix(r.Path, "/terminal") }

// wsHandshake opens a WebSocket to path as cl (its cookies and an Origin of
// ours, or its token) and returns the handshake's status: 101 when it
// opened, else the refusal's status and problem document.
func wsHandshake(t *testing.T, cl *webtest.Client, path string) (int, string, http.Header) {
	t.Helper()
	hdr := http.Header{}
	if cl.Bearer != "" {
		hdr.Set("Authorization", "Bearer "+cl.Bearer)
	} else {
		hdr.Set("Origin", cl.Base)
	}
	d := websocket.Dialer{Jar: cl.Jar, HandshakeTimeout: 20 * time.Second}
	conn, resp, err := d.Dial("ws"+strings.TrimPrefix(cl.Base, "http")+path, hdr)
	if err == nil {
		defer conn.Close()
		return resp.StatusCode, "", resp.Header
	}
	if resp == nil {
		t.Fatalf("WebSocket %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestRolesTable checks every route of the route table against every kind
// of caller: allowed exactly when the route's permission and tenants.Can
// say so, and denied the way the route's kind (page or API) denies.
func TestRolesTable(t *testing.T) {
	env := webtest.New(t, webtest.Options{Operators: []string{"operator@platform.test"}})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	f := &fixtures{env: env, tenant: acme}

	callers := []*caller{{name: "anonymous", kind: "anonymous", client: env.Anonymous()}}
	op := &caller{name: "operator", kind: "operator", operator: true, email: "operator@platform.test"}
	op.client = env.Login(t, op.email)
	callers = append(callers, op)
	var tokens []*caller
	for _, role := range tenants.Roles {
		email := string(role) + "@acme-corp.test"
		env.Member(t, acme, email, role)
		s := &caller{name: "session " + string(role), kind: "session", role: role, tenant: &acme, email: email}
		s.client = env.Login(t, email)
		callers = append(callers, s)
		tokens = append(tokens, &caller{name: "token " + string(role), kind: "token", role: role, tenant: &acme,
			client: env.WithToken(env.Token(t, acme, role))})
	}

	routes := env.App.RouteTable()
	if len(routes) == 0 {
		t.Fatal("Got(route table) = empty; want routes")
	}
	for _, r := range routes {
		t.Run(r.Method+" "+r.Path, func(t *testing.T) {
			cs := callers
			if r.API {
				cs = append(append([]*caller{}, callers...), tokens...)
			}
			for _, c := range cs {
				t.Run(c.name, func(t *testing.T) {
					path, real := f.fill(t, r.Path)
					if !real {
						t.Errorf("no fixture for the parameters of %s: add the kind to fixtures.objectFor", r.Path)
					}
					form, in := f.input(r, c, path)
					status, body, hdr := call(t, c, r, path, form, in)
					checkAccess(t, r, c, real, status, body, hdr)
					if c.kind == "session" || c.kind == "operator" {
						// A call may end the session (logout): sign in again.
						if s, _ := me(t, c.client); s != http.StatusOK {
							c.client = env.Login(t, c.email)
						}
					}
				})
			}
		})
	}
}

func checkAccess(t *testing.T, r web.Route, c *caller, real bool, status int, body string, hdr http.Header) {
	t.Helper()
	allowed := c.allowed(r)
	if want, why := harnessStatus(r); allowed && want != 0 && !handlerAnswers(r, c) {
		// Authorized, then the handler cannot do its work in this harness:
		// exactly the answer this route gives then.
		if status != want {
			t.Errorf("Got(status) = %d; want %d (%s): %.300s", status, want, why, body)
		}
		return
	}
	if status >= 500 {
		t.Fatalf("Got(status) = %d; want no server error: %.300s", status, body)
	}
	denied := status == http.StatusUnauthorized || status == http.StatusForbidden || loginRedirect(status, hdr) ||
		(status == http.StatusSeeOther && hdr.Get("Location") == "/tenants/choose")
	if allowed {
		want, why := handlerStatus(r, c)
		if !real && want == 0 {
			want, why = http.StatusNotFound, "the object does not exist"
			if status < 400 {
				want = status
			}
		}
		switch {
		case want != 0 && status != want:
			t.Errorf("Got(status) = %d; want %d (%s)", status, want, why)
		case want == 0 && (denied || status >= 400):
			t.Errorf("Got(status) = %d %s; want allowed (%s may %s): %.300s", status, hdr.Get("Location"), c.name, r.Perm, body)
		}
		return
	}
	// Denied: exactly the way this kind of route and caller is denied.
	switch {
	case c.kind == "anonymous" && r.API:
		if status != http.StatusUnauthorized {
			t.Fatalf("Got(status) = %d; want 401", status)
		}
		if p := webtest.Problem(t, hdr, body); p.Status != http.StatusUnauthorized {
			t.Errorf("Got(problem status) = %d; want 401", p.Status)
		}
	case c.kind == "anonymous":
		if !loginRedirect(status, hdr) {
			t.Errorf("Got(status) = %d %q; want 303 to /login?return_to=", status, hdr.Get("Location"))
		}
	case c.tenant == nil && r.Perm.TenantScoped() && !r.API:
		if status != http.StatusSeeOther || hdr.Get("Location") != "/tenants/choose" {
			t.Errorf("Got(status) = %d %q; want 303 to /tenants/choose (no tenant chosen)", status, hdr.Get("Location"))
		}
	case r.API:
		if status != http.StatusForbidden {
			t.Fatalf("Got(status) = %d; want 403", status)
		}
		if p := webtest.Problem(t, hdr, body); p.Status != http.StatusForbidden || p.Detail == "" {
			t.Errorf("Got(problem) = %+v; want 403 saying why", p)
		}
	default:
		if status != http.StatusForbidden || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
			t.Errorf("Got(status) = %d %s; want a 403 page", status, hdr.Get("Content-Type"))
		}
	}
}

// previewLink records a sandbox of f.tenant with a live preview link.
func (f *fixtures) previewLink(t *testing.T) (sandboxID, linkID string) {
	t.Helper()
	n := f.next()
	sb := sandboxtest.Record(t, f.env.DB, f.tenant.ID, fmt.Sprintf("object%d@%s.test", n, f.tenant.Slug))
	now := time.Now().UTC().Truncate(time.Microsecond)
	l := sandbox.PreviewLink{ID: uuid.Must(uuid.NewV7()).String(), TenantID: f.tenant.ID, SandboxID: sb.ID, Port: 8000,
		TokenHash: fmt.Sprintf("fixture-%s-%d", f.tenant.ID, n), CreatedBy: "fixture", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := f.env.DB.Create(&l).Error; err != nil {
		t.Fatalf("record preview link: %v", err)
	}
	return sb.ID, l.ID
}
