package isolation_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/sandbox/terminal/terminaltest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/web/webtest"
)

// stores are the tenant-scoped stores, built on one database.
type stores struct {
	db       *gorm.DB
	tenants  *tenants.Store
	audit    *audit.Log
	policy   *policy.Store
	secrets  *secrets.Store
	usage    *usage.Store
	workflow *workflow.Store
	hooks    *integrations.Store
	egress   *egress.Store
	runs     *runs.Store
	sandbox  *sandbox.Store
	terms    *terminal.Store
	vms      *vmpool.Store
	// compliance is a service, but it keeps the tenant's checklist and
	// probe runs: its methods are accounted for like a store's.
	compliance *compliance.Service
	// volumes is a service too: it keeps the tenant's volumes.
	volumes *volumes.Service
}

// all lists every store the suite accounts for: each exported method of
// each one needs an isolation case or, when it takes no tenant, an entry
// in global saying why.
func (s *stores) all() []any {
	return []any{s.tenants, s.audit, s.policy, s.secrets, s.usage, s.workflow, s.hooks, s.egress, s.runs, s.sandbox, s.terms, s.vms, s.compliance, s.volumes}
}

func newStores(t *testing.T, db *gorm.DB) *stores {
	t.Helper()
	pol, err := policy.NewStore(db, nil)
	if err != nil {
		t.Fatalf("policy.NewStore: %v", err)
	}
	sec, err := secrets.New(db, []byte("0123456789abcdef0123456789abcdef"), secrets.Config{})
	if err != nil {
		t.Fatalf("secrets.New: %v", err)
	}
	wf, err := workflow.NewStore(db, nil)
	if err != nil {
		t.Fatalf("workflow.NewStore: %v", err)
	}
	ts := tenants.NewStore(db, nil)
	comp, err := compliance.New(db, compliance.Config{Policies: pol, Secrets: sec, Tenants: ts, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("compliance.New: %v", err)
	}
	vols, err := volumes.New(db, volumes.Config{DataDir: t.TempDir(), InstallationID: "isolation", Hotplug: refusingHotplug{t}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("volumes.New: %v", err)
	}
	return &stores{db: db, compliance: comp, volumes: vols, tenants: ts, audit: audit.NewLog(db, nil), policy: pol, secrets: sec,
		usage: usage.NewStore(db, nil), workflow: wf, hooks: integrations.NewStore(db, integrations.Config{}), egress: egress.NewStore(db),
		runs: runs.NewStore(db, nil), sandbox: sandbox.NewStore(db, nil), terms: terminal.NewStore(db, nil), vms: vmpool.NewStore(db, nil)}
}

// refusingHotplug fails the test when a volume disk is hot-plugged: no
// isolation case may get that far.
type refusingHotplug struct{ t *testing.T }

func (r refusingHotplug) AttachDisk(_ context.Context, tenantID, vmID string, d volumes.Disk) error {
	r.t.Errorf("AttachDisk(%s, %s, %s) called; want no disk hot-plugged", tenantID, vmID, d.Serial)
	return errors.New("refused")
}

func (r refusingHotplug) DetachDisk(_ context.Context, tenantID, vmID string, d volumes.Disk) error {
	r.t.Errorf("DetachDisk(%s, %s, %s) called; want no disk hot-plugged", tenantID, vmID, d.Serial)
	return errors.New("refused")
}

// global are the exported methods that take no tenant, with why that is
// right. A method listed here that takes a tenant fails the suite too.
var global = map[string]string{
	"tenants.Store.CompleteIdempotent":           "by the id of a key BeginIdempotent returned for its tenant",
	"tenants.Store.AbandonIdempotent":            "by the id of a key BeginIdempotent returned for its tenant",
	"tenants.Store.DeleteExpiredIdempotencyKeys": "housekeeping over every tenant",
	"tenants.Store.DeleteSession":                "by the session id, which is the hash of the caller's own cookie",
	"tenants.Store.DeleteExpiredSessions":        "housekeeping over every tenant",
	"tenants.Store.SessionBySecret":              "the cookie secret names its session; the tenant comes from it",
	"tenants.Store.InstallationID":               "one per deployment",
	"tenants.Store.Ping":                         "database health",
	"tenants.Store.CreateTenant":                 "makes a tenant (platform operators)",
	"tenants.Store.CreateTenantWithAdmin":        "makes a tenant (platform operators)",
	"tenants.Store.ListTenants":                  "every tenant (platform operators)",
	"tenants.Store.TenantBySlug":                 "resolves a tenant the caller names; membership is checked by RoleOf",
	"tenants.Store.TenantByID":                   "resolves a tenant; membership is checked by RoleOf",
	"tenants.Store.AuthenticateToken":            "the token secret names its tenant",
	"tenants.Store.UpsertUserAtLogin":            "users are not tenant-owned",
	"tenants.Store.UserByID":                     "users are not tenant-owned",
	"tenants.Store.UserTenants":                  "the user's own memberships",
	"tenants.Store.FrozenTenants":                "every tenant's freeze (platform operators)",
	"policy.Store.Validator":                     "the schema, the same for every tenant",
	"usage.Store.DB":                             "the database, for the sampler's transactions",
	"usage.Store.Observe":                        "the sampler's, by the id of a sandbox it runs (the meter holds the tenant)",
	"usage.Store.OpenMeters":                     "the sampler's work list over every tenant",
	"usage.Store.PruneSamples":                   "housekeeping over every tenant",
	"usage.Store.LoadPrices":                     "the price books of every tenant, for pricing",
	"usage.Store.AllTenants":                     "every tenant's usage (platform operators)",
	"workflow.Store.Parser":                      "the workflow schema, the same for every tenant",
	"integrations.Store.CheckURL":                "a URL rule, the same for every tenant",
	"integrations.Store.Check":                   "validates a new endpoint's fields (no read or write: the same rules for every tenant)",
	"integrations.Store.Prune":                   "housekeeping over every tenant",
	"egress.Store.Prune":                         "housekeeping over every tenant",
	"runs.Store.Queued":                          "the engine's work list over every tenant",
	"runs.Store.Interrupted":                     "the engine's recovery list over every tenant",
	"vmpool.Store.InstallationID":                "one per deployment",
	"vmpool.Store.Pools":                         "the reconciler's list over every tenant",
	"vmpool.Store.AllVMs":                        "the reconciler's list over every tenant",
	"vmpool.Store.Hosts":                         "libvirt hosts are the platform's (platform operators)",
	"vmpool.Store.AddHost":                       "libvirt hosts are the platform's (platform operators)",
	"vmpool.Store.CordonHost":                    "libvirt hosts are the platform's (platform operators)",
	"vmpool.Store.UncordonHost":                  "libvirt hosts are the platform's (platform operators)",
	"vmpool.Store.DrainHost":                     "libvirt hosts are the platform's (platform operators)",
	"vmpool.Store.RemoveHost":                    "libvirt hosts are the platform's (platform operators)",
	"compliance.Service.Config":                  "the service's configuration",
	"compliance.Service.Start":                   "starts the evaluation and probe loops over every tenant",
	"compliance.Service.Run":                     "runs the evaluation and probe loops over every tenant for one leader term",
	"compliance.Service.Close":                   "stops the loops",
}

// TestStoreIsolation calls every tenant-scoped store method as tenant B on
// tenant A's objects: each answers not found or nothing of A, and leaves
// every row of A as it was. A tenant-scoped method without a case fails
// ("method X never called"). On SQLite and PostgreSQL.
func TestStoreIsolation(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			s := newStores(t, d.DB)
			methods := storeMethods(t, s.all())
			f := &fixtures{stores: s}
			f.a = f.tenant(t, "alpha-iso", true)
			f.b = f.tenant(t, "bravo-iso", false)
			called := map[string]bool{}
			for _, c := range cases(f) {
				if _, ok := methods[c.method]; !ok {
					t.Errorf("case for %s: no such store method; want one case per method of the stores", c.method)
					continue
				}
				called[c.method] = true
				t.Run(c.method, func(t *testing.T) {
					if c.setup != nil {
						defer c.setup(t)()
					}
					before := f.rowsOf(t, f.a.tenant.ID)
					c.run(t)
					if after := f.rowsOf(t, f.a.tenant.ID); after != before {
						t.Errorf("Got(tenant A's rows after %s as B) changed; want A left alone", c.method)
					}
				})
			}
			names := make([]string, 0, len(methods))
			for n := range methods {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				scoped := methods[n]
				why, isGlobal := global[n]
				switch {
				case called[n] && isGlobal:
					t.Errorf("method %s has an isolation case and is listed global (%s); want one of them", n, why)
				case called[n]:
				case scoped && isGlobal:
					t.Errorf("method %s takes a tenant but is listed global (%s): give it an isolation case", n, why)
				case scoped:
					t.Errorf("method %s never called: it takes a tenant, so add an isolation case to cases()", n)
				case !isGlobal:
					t.Errorf("method %s never called: add an isolation case, or list it in global saying why it takes no tenant", n)
				}
			}
			for n := range global {
				if _, ok := methods[n]; !ok {
					t.Errorf("global lists %s, which is no store method; want the list current", n)
				}
			}
		})
	}
}

// storeMethods returns every exported method of the stores by name
// ("tenants.Store.ListMembers") and whether it takes a tenant: a parameter
// named tenantID in its source, or a struct parameter with a TenantID field.
func storeMethods(t *testing.T, all []any) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, s := range all {
		typ := reflect.TypeOf(s)
		named := typ.Elem()
		params := sourceParams(t, named.PkgPath(), named.Name())
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			name := named.String() + "." + m.Name
			scoped := false
			for _, p := range params[m.Name] {
				if strings.EqualFold(p, "tenantID") {
					scoped = true
				}
			}
			for j := 1; j < m.Type.NumIn(); j++ { // 0 is the receiver
				in := m.Type.In(j)
				if in.Kind() == reflect.Pointer {
					in = in.Elem()
				}
				if in.Kind() == reflect.Struct {
					if _, ok := in.FieldByName("TenantID"); ok {
						scoped = true
					}
				}
			}
			if _, ok := params[m.Name]; !ok {
				t.Fatalf("no source of %s found: the suite cannot tell whether it takes a tenant", name)
			}
			out[name] = scoped
		}
	}
	if len(out) < 50 {
		t.Fatalf("Got(store methods) = %d; want every method of the stores (50 or more)", len(out))
	}
	return out
}

// sourceParams parses the package's source and returns the parameter names
// of each method of type recv.
func sourceParams(t *testing.T, pkgPath, recv string) map[string][]string {
	t.Helper()
	const module = "github.com/stockade-dev/stockade"
	dir := filepath.Join(moduleRoot(t), strings.TrimPrefix(strings.TrimPrefix(pkgPath, module), "/"))
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("source of %s in %s: %v", pkgPath, dir, err)
	}
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			star, ok := fd.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			if id, ok := star.X.(*ast.Ident); !ok || id.Name != recv {
				continue
			}
			names := []string{}
			for _, p := range fd.Type.Params.List {
				for _, n := range p.Names {
					names = append(names, n.Name)
				}
			}
			out[fd.Name.Name] = names
		}
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// storeCase is one isolation case: run calls the method as tenant B on
// tenant A's objects and checks what it answers; setup, when set, prepares
// A (outside the check that A is left alone) and returns its undo.
type storeCase struct {
	method string
	setup  func(t *testing.T) func()
	run    func(t *testing.T)
}

// tenantFixture is one tenant with one object of every kind.
type tenantFixture struct {
	tenant     tenants.Tenant
	actor      audit.Actor
	userID     string
	userEmail  string
	pending    tenants.Membership // an invitation not yet accepted
	tokenID    string
	ownTokenID string // made by the admin: owned
	sessionID  string
	idem       tenants.IdemKey
	secret     string
	secretID   string
	host       string
	sealed     string
	workflow   workflow.Version
	runID      string
	delivery   runs.Delivery
	endpointID string
	hookDeliv  string
	sandbox    sandbox.Sandbox
	idemKey    string
	execID     string
	procID     string
	termID     string
	probeID    string
	vmID       string
	volume     string
	egressID   string
	policyVer  int
	priceID    string
	markers    []string
}

type fixtures struct {
	*stores
	a, b *tenantFixture
}

var ctx = context.Background()

// must returns v, failing t (saying what failed) on err.
func must[T any](v T, err error) func(t *testing.T, what string) T {
	return func(t *testing.T, what string) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// tenant makes a tenant with one object of every kind; metered adds usage
// (only A has any, so B's figures must stay zero).
func (f *fixtures) tenant(t *testing.T, slug string, metered bool) *tenantFixture {
	t.Helper()
	sys := audit.Actor{Kind: audit.ActorSystem, Name: "isolation test"}
	x := &tenantFixture{}
	x.tenant = must(f.tenants.CreateTenant(ctx, sys, slug, "Tenant "+slug))(t, "create tenant")
	tid := x.tenant.ID
	x.userEmail = "admin@" + slug + ".test"
	must(f.tenants.InviteMember(ctx, sys, tid, x.userEmail, tenants.RoleAdmin))(t, "invite admin")
	u := must(f.tenants.UpsertUserAtLogin(ctx, tenants.Identity{Issuer: "https://idp.test", Subject: slug, Email: x.userEmail, Name: slug}))(t, "sign in admin")
	x.userID = u.ID
	x.actor = audit.Actor{Kind: audit.ActorUser, ID: u.ID, Name: x.userEmail}
	x.pending = must(f.tenants.InviteMember(ctx, sys, tid, "pending@"+slug+".test", tenants.RoleDeveloper))(t, "invite")
	_, tok, err := f.tenants.CreateToken(ctx, sys, tid, tenants.NewToken{Name: slug + "-ci", Role: tenants.RoleAdmin})
	x.tokenID = must(tok.ID, err)(t, "create token")
	// And one the admin made, so it has an owner (ListTokensOf, RevokeTokenOf).
	_, own, err := f.tenants.CreateToken(ctx, x.actor, tid, tenants.NewToken{Name: slug + "-own", Role: tenants.RoleDeveloper})
	x.ownTokenID = must(own.ID, err)(t, "create the admin's own token")
	_, sess, err := f.tenants.CreateSession(ctx, u.ID, tid, "test", "127.0.0.1", time.Hour)
	x.sessionID = must(sess.ID, err)(t, "create session")
	k, _, err := f.tenants.BeginIdempotent(ctx, tenants.IdemRequest{TenantID: tid, Principal: "principal-" + slug, Route: "POST /api/v1/sandboxes",
		Key: "key-" + slug, RequestHash: "hash-" + slug, Owner: "owner-" + slug})
	x.idem = must(k, err)(t, "begin idempotent")

	x.secret = strings.ToUpper(strings.ReplaceAll(slug, "-", "_")) + "_TOKEN"
	x.host = "api." + slug + ".test"
	x.secretID = must(f.secrets.Create(ctx, sys, tid, secrets.NewSecret{Name: x.secret, Value: "value-of-" + slug, Hosts: []string{x.host}}))(t, "create secret").ID
	x.sealed = must(f.secrets.Seal("isolation", tid, "object-"+slug, []byte("sealed of "+slug)))(t, "seal")
	must(f.secrets.CAPEM(ctx, tid))(t, "ca")

	// A has one more policy version than B: a version number of A that B
	// lacks.
	versions := 1
	if metered {
		versions = 3
	}
	for i := range versions {
		doc := policy.Defaults()
		doc.Network.Egress.Allow = []policy.Rule{{Domain: fmt.Sprintf("v%d.%s", i, x.host), Ports: []int{443}}}
		v := must(f.policy.Save(ctx, sys, tid, policy.Edit{Doc: doc, Reason: "policy of " + slug}))(t, "save policy")
		x.policyVer = v.Version
	}

	src := fmt.Sprintf("name: wf-%s\ndescription: of %s\ntriggers:\n  - event: manual\nsteps:\n  - name: test\n    run: make test\n", slug, slug)
	x.workflow = must(f.workflow.Save(ctx, x.actor, tid, []byte(src), nil))(t, "save workflow")
	must(f.workflow.SetGitHubSecret(ctx, x.actor, tid, x.secret))(t, "workflow settings")
	x.runID = must(f.runs.Create(ctx, x.actor, tid, runs.NewRun{Version: x.workflow, Trigger: runs.Trigger{Kind: runs.TriggerManual}}))(t, "create run").ID
	sum := sha256.Sum256([]byte("delivery body of " + slug))
	x.delivery = runs.Delivery{DeliveryID: "delivery-" + slug, Event: "push", Repository: "org/" + slug, BodySHA256: hex.EncodeToString(sum[:])}
	must(f.runs.Deliver(ctx, sys, tid, x.delivery, nil))(t, "deliver")

	ep := must(f.hooks.Create(ctx, sys, tid, integrations.NewEndpoint{URL: "https://hooks." + slug + ".example.com/in", SecretName: x.secret}))(t, "create webhook")
	x.endpointID = ep.ID
	x.hookDeliv = must(f.hooks.SendTest(ctx, sys, tid, ep.ID))(t, "send test").ID

	x.sandbox = sandboxtest.RecordState(t, f.db, tid, x.userEmail, sandbox.StateStopped)
	x.idemKey = "sandbox-key-" + slug
	if err := f.db.Model(&sandbox.Sandbox{}).Where("id = ?", x.sandbox.ID).Update("idempotency_key", x.idemKey).Error; err != nil {
		t.Fatalf("set idempotency key: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	code := 0
	x.execID = "exec-" + slug
	if err := f.db.Create(&sandbox.ExecRecord{ID: x.execID, SandboxID: x.sandbox.ID, TenantID: tid, ArgvJSON: `["true"]`, Actor: x.userEmail,
		StartedAt: now, EndedAt: &now, ExitCode: &code, Reason: "exited", Stdout: "out of " + slug}).Error; err != nil {
		t.Fatalf("record exec: %v", err)
	}
	x.probeID = uuid.Must(uuid.NewV7()).String()
	if err := f.db.Exec(`INSERT INTO probe_runs (id, tenant_id, sandbox_id, state, actor_kind, actor_id, actor_name, started_at, ended_at, checks, output, error)
		VALUES (?, ?, ?, 'completed', 'system', 'compliance', 'compliance checks', ?, ?, '[]', ?, '')`,
		x.probeID, tid, x.sandbox.ID, now.Add(-time.Minute), now, "probe output of "+slug).Error; err != nil {
		t.Fatalf("record probe run: %v", err)
	}
	must(f.compliance.Evaluate(ctx, tid))(t, "evaluate compliance")
	x.termID = terminaltest.Record(t, f.db, t.TempDir(), tid, x.sandbox.ID, x.userEmail).ID
	x.procID = sandboxtest.RecordProcess(t, f.db, tid, x.sandbox.ID, 42, sandbox.ProcessExited).ID

	// Hosts are the platform's: one row for the VM to name.
	if err := f.db.Create(&vmpool.Host{URI: "test:///" + slug, Health: vmpool.HealthOK, CPUs: 4}).Error; err != nil {
		t.Fatalf("record host: %v", err)
	}
	must(f.vms.SetPool(ctx, sys, tid, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 512, MaxVMs: 2}))(t, "set pool")
	x.vmID = must(f.vms.CreateVM(ctx, sys, tid, vmpool.NewVM{HostURI: "test:///" + slug, ImageVersion: "image-" + slug}))(t, "create vm").ID
	x.volume = must(f.volumes.Create(ctx, sys, tid, "data-"+slug, 1))(t, "create volume").Name

	ev := &egress.Event{TenantID: tid, SandboxID: x.sandbox.ID, Method: "CONNECT", Host: "egress." + slug + ".test", Port: 443,
		Decision: egress.DecisionDeny, Rule: "default deny", StartedAt: now}
	if err := f.egress.Record(ctx, ev); err != nil {
		t.Fatalf("record egress: %v", err)
	}
	x.egressID = ev.ID

	if metered {
		webtest.Meter(t, f.db, webtest.Run{TenantID: tid, SandboxID: x.sandbox.ID, Template: "busybox", UserID: u.ID, UserName: x.userEmail,
			VCPUs: 1, MemoryMiB: 64, Start: now.Add(-2 * time.Hour), For: time.Hour, Cores: 0.5, UsedMiB: 32, EgressUp: 1000, EgressDown: 2000})
		x.priceID = must(f.usage.SetPrice(ctx, sys, usage.Price{TenantID: tid, Currency: "USD", VCPUSecond: 0.00003,
			GiBSecond: 0.000004, EgressGB: 0.07}))(t, "set price").ID
	}
	x.markers = []string{tid, x.userID, x.userEmail, x.pending.ID, x.tokenID, x.ownTokenID, x.idem.ID, x.secretID, x.workflow.Name, x.runID,
		x.delivery.DeliveryID, x.endpointID, x.hookDeliv, x.sandbox.ID, x.idemKey, x.execID, x.procID, x.termID, x.vmID, x.egressID, x.probeID}
	if x.priceID != "" {
		x.markers = append(x.markers, x.priceID)
	}
	return x
}

// rowsOf digests every row of the tenant: each table with a tenant_id
// column, and the tenant's own row.
func (f *fixtures) rowsOf(t *testing.T, tenantID string) string {
	t.Helper()
	var tables []string
	q := `SELECT table_name FROM information_schema.columns WHERE column_name = 'tenant_id' AND table_schema = current_schema() ORDER BY table_name`
	if f.db.Dialector.Name() == "sqlite" {
		q = `SELECT m.name FROM sqlite_master m JOIN pragma_table_info(m.name) p ON p.name = 'tenant_id' WHERE m.type = 'table' ORDER BY m.name`
	}
	if err := f.db.Raw(q).Scan(&tables).Error; err != nil || len(tables) < 10 {
		t.Fatalf("Got(tables with tenant_id) = %v, %v; want the tenant-owned tables", tables, err)
	}
	h := sha256.New()
	read := func(table, where string) {
		var rows []map[string]any
		if err := f.db.Table(table).Where(where, tenantID).Find(&rows).Error; err != nil {
			t.Fatalf("read %s of tenant: %v", table, err)
		}
		for _, r := range rows {
			b, _ := json.Marshal(r) // map keys sort, so the digest is stable
			h.Write(b)
		}
		fmt.Fprintf(h, "|%s:%d|", table, len(rows))
	}
	for _, table := range tables {
		read(table, "tenant_id = ?")
	}
	read("tenants", "id = ?")
	return hex.EncodeToString(h.Sum(nil))
}

// noneOfA fails when v, as JSON, holds anything of tenant A.
func (f *fixtures) noneOfA(t *testing.T, what string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %s: %v", what, err)
	}
	for _, m := range f.a.markers {
		if strings.Contains(string(b), m) {
			t.Errorf("Got(%s as B) holds %q of tenant A; want nothing of A: %.300s", what, m, b)
		}
	}
}

func notFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Got(%s as B on A's object) = %v; want errdefs.ErrNotFound", what, err)
	}
}

func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("Got(%s as B) = %v; want success in B's own tenant", what, err)
	}
}

func empty[T any](t *testing.T, what string, v []T, err error) {
	t.Helper()
	if err != nil || len(v) != 0 {
		t.Errorf("Got(%s as B on A's object) = %d items, %v; want none", what, len(v), err)
	}
}

// cases are the isolation cases, one per tenant-scoped method.
func cases(f *fixtures) []storeCase {
	a, b := f.a, f.b
	bID := func() string { return b.tenant.ID }
	freezeA := func(t *testing.T) func() {
		must(f.tenants.FreezeTenant(ctx, a.actor, a.tenant.ID, "isolation test"))(t, "freeze A")
		return func() {
			if err := f.tenants.UnfreezeTenant(ctx, a.actor, a.tenant.ID); err != nil {
				t.Errorf("unfreeze A: %v", err)
			}
		}
	}
	var out []storeCase
	add := func(method string, run func(t *testing.T)) { out = append(out, storeCase{method: method, run: run}) }
	// list: B's answer holds nothing of A.
	list := func(method string, call func() (any, error)) {
		add(method, func(t *testing.T) {
			v, err := call()
			noErr(t, method, err)
			f.noneOfA(t, method, v)
		})
	}
	// missing: A's object, asked for as B, is not found.
	missing := func(method string, call func() error) {
		add(method, func(t *testing.T) { notFound(t, method, call()) })
	}

	// tenants.Store
	add("tenants.Store.FreezeTenant", func(t *testing.T) {
		_, err := f.tenants.FreezeTenant(ctx, b.actor, bID(), "isolation test")
		noErr(t, "FreezeTenant", err)
		if _, frozen, err := f.tenants.TenantFreeze(ctx, a.tenant.ID); frozen || err != nil {
			t.Errorf("Got(A frozen after B's freeze) = %v, %v; want not frozen", frozen, err)
		}
		noErr(t, "UnfreezeTenant", f.tenants.UnfreezeTenant(ctx, b.actor, bID()))
	})
	out = append(out, storeCase{method: "tenants.Store.UnfreezeTenant", setup: freezeA, run: func(t *testing.T) {
		if err := f.tenants.UnfreezeTenant(ctx, b.actor, bID()); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(UnfreezeTenant of B while A is frozen) = %v; want ErrConflict (B is not frozen)", err)
		}
	}})
	out = append(out, storeCase{method: "tenants.Store.TenantFreeze", setup: freezeA, run: func(t *testing.T) {
		if fr, frozen, err := f.tenants.TenantFreeze(ctx, bID()); frozen || err != nil {
			t.Errorf("Got(TenantFreeze of B while A is frozen) = %+v %v, %v; want not frozen", fr, frozen, err)
		}
	}})
	out = append(out, storeCase{method: "tenants.Store.CheckNotFrozen", setup: freezeA, run: func(t *testing.T) {
		noErr(t, "CheckNotFrozen while A is frozen", f.tenants.CheckNotFrozen(ctx, bID()))
	}})
	add("tenants.Store.BeginIdempotent", func(t *testing.T) {
		k, begun, err := f.tenants.BeginIdempotent(ctx, tenants.IdemRequest{TenantID: bID(), Principal: a.idem.Principal, Route: a.idem.Route,
			Key: a.idem.Key, RequestHash: a.idem.RequestHash, Owner: a.idem.Owner})
		if err != nil || !begun || k.ID == a.idem.ID || k.TenantID != bID() {
			t.Errorf("Got(BeginIdempotent in B with A's key) = %+v begun %v, %v; want a new key of B", k, begun, err)
		}
	})
	add("tenants.Store.TakeOverIdempotent", func(t *testing.T) {
		k := a.idem
		k.TenantID = bID()
		took, err := f.tenants.TakeOverIdempotent(ctx, k, "owner-of-b")
		if took || err != nil {
			t.Errorf("Got(TakeOverIdempotent of A's key as B) = %v, %v; want false (not B's key)", took, err)
		}
	})
	add("tenants.Store.InviteMember", func(t *testing.T) {
		m, err := f.tenants.InviteMember(ctx, b.actor, bID(), a.pending.Email, tenants.RoleDeveloper)
		if err != nil || m.ID == a.pending.ID || m.TenantID != bID() {
			t.Fatalf("Got(InviteMember in B of A's invitee) = %+v, %v; want B's own invitation (no conflict with A's)", m, err)
		}
		noErr(t, "RemoveMember of it", f.tenants.RemoveMember(ctx, b.actor, bID(), m.ID))
	})
	list("tenants.Store.ListMembers", func() (any, error) { return f.tenants.ListMembers(ctx, bID()) })
	missing("tenants.Store.SetMemberRole", func() error { return f.tenants.SetMemberRole(ctx, b.actor, bID(), a.pending.ID, tenants.RoleAdmin) })
	missing("tenants.Store.RemoveMember", func() error { return f.tenants.RemoveMember(ctx, b.actor, bID(), a.pending.ID) })
	add("tenants.Store.Quota", func(t *testing.T) {
		q, err := f.tenants.Quota(ctx, bID())
		if err != nil || q.TenantID != bID() {
			t.Errorf("Got(Quota of B) = %+v, %v; want B's", q, err)
		}
	})
	add("tenants.Store.SetQuota", func(t *testing.T) {
		q, err := f.tenants.SetQuota(ctx, b.actor, bID(), tenants.Quota{MaxVMs: 8, MaxVCPUs: 16, MaxMemoryMiB: 16384, MaxSandboxes: 8, MaxCPUHoursMonthly: 100, MaxVolumeGiB: 10})
		if err != nil || q.TenantID != bID() {
			t.Errorf("Got(SetQuota of B) = %+v, %v; want B's", q, err)
		}
	})
	missing("tenants.Store.CreateSession", func() error {
		_, _, err := f.tenants.CreateSession(ctx, a.userID, bID(), "test", "127.0.0.1", time.Hour)
		return err
	})
	missing("tenants.Store.SetSessionTenant", func() error { return f.tenants.SetSessionTenant(ctx, a.sessionID, bID()) })
	add("tenants.Store.CreateToken", func(t *testing.T) {
		_, tok, err := f.tenants.CreateToken(ctx, b.actor, bID(), tenants.NewToken{Name: "b-iso-token", Role: tenants.RoleAdmin})
		if err != nil || tok.TenantID != bID() || tok.ID == a.tokenID {
			t.Errorf("Got(CreateToken in B) = %+v, %v; want B's own token", tok, err)
		}
	})
	list("tenants.Store.ListTokens", func() (any, error) { return f.tenants.ListTokens(ctx, bID()) })
	missing("tenants.Store.RevokeToken", func() error { return f.tenants.RevokeToken(ctx, b.actor, bID(), a.tokenID) })
	// A's member's own tokens, asked for in B.
	list("tenants.Store.ListTokensOf", func() (any, error) { return f.tenants.ListTokensOf(ctx, bID(), a.userID) })
	missing("tenants.Store.RevokeTokenOf", func() error { return f.tenants.RevokeTokenOf(ctx, b.actor, bID(), a.userID, a.ownTokenID) })
	missing("tenants.Store.RoleOf", func() error { _, err := f.tenants.RoleOf(ctx, bID(), a.userID); return err })

	// audit.Log
	add("audit.Log.Record", func(t *testing.T) {
		noErr(t, "Record", f.audit.Record(ctx, b.actor.Event(bID(), audit.TypeTenantSelected, "tenant", a.tenant.ID, nil)))
	})
	add("audit.Log.List", func(t *testing.T) {
		for _, fl := range []audit.Filter{{}, {ActorID: a.userID}, {Query: a.tenant.Slug}} {
			evs, err := f.audit.List(ctx, bID(), fl)
			noErr(t, "List", err)
			for _, e := range evs {
				if e.TenantID != bID() {
					t.Errorf("Got(List of B, %+v) has event %s of tenant %s; want B's only", fl, e.ID, e.TenantID)
				}
			}
		}
	})
	add("audit.Log.Count", func(t *testing.T) {
		for _, fl := range []audit.Filter{{}, {ActorID: a.userID}, {Query: a.tenant.Slug}} {
			n, err := f.audit.Count(ctx, bID(), fl)
			noErr(t, "Count", err)
			evs, err := f.audit.List(ctx, bID(), audit.Filter{ActorID: fl.ActorID, Query: fl.Query, Limit: audit.MaxLimit})
			noErr(t, "List", err)
			if n != int64(len(evs)) {
				t.Errorf("Got(Count of B, %+v) = %d; want B's own %d", fl, n, len(evs))
			}
		}
	})
	add("audit.Log.Recent", func(t *testing.T) {
		rows, err := f.audit.Recent(ctx, bID(), 50)
		noErr(t, "Recent", err)
		for _, r := range rows {
			if r.TenantID != bID() || r.First.TenantID != bID() {
				t.Errorf("Got(Recent of B) has event %s of tenant %s; want B's only", r.ID, r.TenantID)
			}
		}
	})
	add("audit.Log.Stream", func(t *testing.T) {
		n := 0
		noErr(t, "Stream", f.audit.Stream(ctx, bID(), audit.Filter{}, func(e audit.Event) error {
			n++
			if e.TenantID != bID() {
				t.Errorf("Got(Stream of B) has event %s of tenant %s; want B's only", e.ID, e.TenantID)
			}
			return nil
		}))
		if n == 0 {
			t.Error("Got(Stream of B) = no events; want B's (the check above would be empty)")
		}
	})
	add("audit.Log.Prune", func(t *testing.T) {
		_, err := f.audit.Prune(ctx, bID(), time.Now().Add(-time.Hour), 1)
		noErr(t, "Prune", err)
	})

	// policy.Store
	list("policy.Store.Current", func() (any, error) { return f.policy.Current(ctx, bID()) })
	add("policy.Store.Get", func(t *testing.T) {
		_, err := f.policy.Get(ctx, bID(), a.policyVer)
		notFound(t, fmt.Sprintf("Get version %d (A's, not B's)", a.policyVer), err)
	})
	list("policy.Store.List", func() (any, error) { return f.policy.List(ctx, bID()) })
	add("policy.Store.Save", func(t *testing.T) {
		base := a.policyVer
		_, err := f.policy.Save(ctx, b.actor, bID(), policy.Edit{Doc: policy.Defaults(), Reason: "on A's version", Base: &base})
		if !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(Save in B on base %d, A's version) = %v; want a conflict (B has no such version)", base, err)
		}
	})
	add("policy.Store.Propose", func(t *testing.T) {
		base := a.policyVer
		_, err := f.policy.Propose(ctx, bID(), policy.Edit{Doc: policy.Defaults(), Reason: "on A's version", Base: &base})
		if !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(Propose in B on base %d, A's version) = %v; want a conflict (B has no such version)", base, err)
		}
	})
	missing("policy.Store.Commit", func() error {
		// A proposal made for A, committed as B.
		p, err := f.policy.Propose(ctx, a.tenant.ID, policy.Edit{Doc: policy.Defaults(), Reason: "A's proposal"})
		if err != nil {
			return fmt.Errorf("propose in A: %w", err)
		}
		_, err = f.policy.Commit(ctx, b.actor, bID(), p)
		return err
	})
	missing("policy.Store.Rollback", func() error {
		_, err := f.policy.Rollback(ctx, b.actor, bID(), a.policyVer, "to A's version")
		return err
	})
	missing("policy.Store.RollbackOn", func() error {
		_, err := f.policy.RollbackOn(ctx, b.actor, bID(), a.policyVer, "to A's version", nil)
		return err
	})

	// secrets.Store
	add("volumes.Service.Create", func(t *testing.T) {
		v, err := f.volumes.Create(ctx, b.actor, bID(), a.volume, 1)
		noErr(t, "Create with A's volume name", err)
		noErr(t, "Delete it", f.volumes.Delete(ctx, b.actor, bID(), v.Name))
	})
	list("volumes.Service.List", func() (any, error) { return f.volumes.List(ctx, bID()) })
	missing("volumes.Service.Get", func() error { _, err := f.volumes.Get(ctx, bID(), a.volume); return err })
	missing("volumes.Service.Resize", func() error { _, err := f.volumes.Resize(ctx, b.actor, bID(), a.volume, 2); return err })
	missing("volumes.Service.Delete", func() error { return f.volumes.Delete(ctx, b.actor, bID(), a.volume) })
	add("volumes.Service.Plan", func(t *testing.T) {
		_, err := f.volumes.Plan(ctx, bID(), []volumes.Request{{Name: a.volume, Path: "/data"}})
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "no volume") {
			t.Errorf("Got(Plan of A's volume as B) = %v; want no such volume", err)
		}
	})
	// B's own volume onto A's VM: not found, and nothing is hot-plugged
	// (refusingHotplug fails the test if it is asked to).
	missing("volumes.Service.Attach", func() error {
		_, err := f.volumes.Attach(ctx, b.actor, bID(), b.sandbox.ID, a.vmID, []volumes.Request{{Name: b.volume, Path: "/data"}}, nil)
		return err
	})
	add("volumes.Service.Release", func(t *testing.T) {
		f.volumes.Release(ctx, bID(), a.sandbox.ID, func(string) (volumes.Guest, error) {
			t.Errorf("Release as B asked for the guest of A's sandbox's VM; want nothing touched")
			return nil, errors.New("no guest")
		})
	})
	add("secrets.Store.Create", func(t *testing.T) {
		s, err := f.secrets.Create(ctx, b.actor, bID(), secrets.NewSecret{Name: a.secret, Value: "b's value", Hosts: []string{b.host}})
		noErr(t, "Create with A's secret name", err)
		noErr(t, "Revoke it", f.secrets.Revoke(ctx, b.actor, bID(), s.Name))
	})
	list("secrets.Store.List", func() (any, error) { return f.secrets.List(ctx, bID()) })
	missing("secrets.Store.Get", func() error { _, err := f.secrets.Get(ctx, bID(), a.secret); return err })
	missing("secrets.Store.Revoke", func() error { return f.secrets.Revoke(ctx, b.actor, bID(), a.secret) })
	missing("secrets.Store.SetInject", func() error {
		_, err := f.secrets.SetInject(ctx, b.actor, bID(), a.secret, []string{"query"})
		return err
	})
	add("secrets.Store.Credentials", func(t *testing.T) {
		cs, ok, err := f.secrets.Credentials(ctx, bID(), b.sandbox.ID, a.host)
		if ok || err != nil || len(cs) != 0 {
			t.Errorf("Got(Credentials of B for A's host) = %d, %v, %v; want none", len(cs), ok, err)
		}
	})
	add("secrets.Store.Env", func(t *testing.T) {
		env, err := f.secrets.Env(ctx, bID(), b.sandbox.ID, []string{a.secret})
		empty(t, "Env with A's secret name", env, err)
	})
	add("secrets.Store.ForHost", func(t *testing.T) {
		r, ok, err := f.secrets.ForHost(ctx, bID(), b.sandbox.ID, a.host)
		if ok || err != nil || r != nil {
			t.Errorf("Got(ForHost of B for A's host) = %v, %v, %v; want nothing", r, ok, err)
		}
	})
	add("secrets.Store.Scoped", func(t *testing.T) {
		if ok, err := f.secrets.Scoped(ctx, bID(), a.host); ok || err != nil {
			t.Errorf("Got(Scoped of B for A's host) = %v, %v; want false", ok, err)
		}
	})
	add("secrets.Store.Placeholder", func(t *testing.T) {
		if pb, pa := f.secrets.Placeholder(bID(), a.sandbox.ID, a.secret), f.secrets.Placeholder(a.tenant.ID, a.sandbox.ID, a.secret); pb == pa {
			t.Errorf("Got(placeholder of B) = A's %q; want one bound to the tenant", pa)
		}
	})
	add("secrets.Store.Seal", func(t *testing.T) {
		s := must(f.secrets.Seal("isolation", bID(), "object-"+a.tenant.Slug, []byte("b's")))(t, "Seal")
		if _, err := f.secrets.Open("isolation", a.tenant.ID, "object-"+a.tenant.Slug, s); err == nil {
			t.Error("Got(B's sealed text opened as A) = success; want it bound to B")
		}
	})
	add("secrets.Store.Open", func(t *testing.T) {
		if p, err := f.secrets.Open("isolation", bID(), "object-"+a.tenant.Slug, a.sealed); err == nil {
			t.Errorf("Got(A's sealed text opened as B) = %q; want an error", p)
		}
	})
	caOf := func(t *testing.T, tid string) *x509.CertPool {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(must(f.secrets.CAPEM(ctx, tid))(t, "CAPEM"))) {
			t.Fatal("Got(CA PEM) unreadable")
		}
		return pool
	}
	add("secrets.Store.CAPEM", func(t *testing.T) {
		pa, pb := must(f.secrets.CAPEM(ctx, a.tenant.ID))(t, "CAPEM of A"), must(f.secrets.CAPEM(ctx, bID()))(t, "CAPEM of B")
		if pa == pb {
			t.Error("Got(CA of B) = A's; want one CA per tenant")
		}
	})
	add("secrets.Store.Leaf", func(t *testing.T) {
		c := must(f.secrets.Leaf(ctx, bID(), a.host))(t, "Leaf")
		if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: caOf(t, a.tenant.ID), DNSName: a.host}); err == nil {
			t.Error("Got(B's leaf verified by A's CA) = success; want A's sandboxes not to trust B's gateway certificates")
		}
	})
	add("secrets.Store.TLSConfig", func(t *testing.T) {
		// A real handshake with B's gateway config: a client trusting A's CA
		// refuses it, one trusting B's accepts it.
		cfg := must(f.secrets.TLSConfig(ctx, bID()))(t, "TLSConfig")
		for _, c := range []struct {
			ca   string
			want bool
		}{{a.tenant.ID, false}, {bID(), true}} {
			if got := handshake(cfg, caOf(t, c.ca), a.host); (got == nil) != c.want {
				t.Errorf("Got(handshake with B's gateway trusting the CA of %s) = %v; want success %v", c.ca, got, c.want)
			}
		}
	})

	// usage.Store: only A has usage, so B's figures are zero.
	rng := usage.Range{From: time.Now().Add(-48 * time.Hour), To: time.Now().Add(time.Hour)}
	add("usage.Store.Meter", func(t *testing.T) {
		if m, err := f.usage.Meter(ctx, bID(), a.sandbox.ID); !errors.Is(err, usage.ErrNoMeter) {
			t.Errorf("Got(Meter of A's sandbox as B) = %+v, %v; want ErrNoMeter", m, err)
		}
	})
	add("usage.Store.Samples", func(t *testing.T) {
		s, err := f.usage.Samples(ctx, bID(), a.sandbox.ID, 100)
		empty(t, "Samples", s, err)
	})
	add("usage.Store.Entries", func(t *testing.T) {
		e, err := f.usage.Entries(ctx, bID(), a.sandbox.ID)
		empty(t, "Entries", e, err)
	})
	add("usage.Store.Meters", func(t *testing.T) {
		if ms, err := f.usage.Meters(ctx, bID(), []string{a.sandbox.ID}); err != nil || len(ms) != 0 {
			t.Errorf("Got(Meters of A's sandbox as B) = %v, %v; want none", ms, err)
		}
	})
	add("usage.Store.UserNames", func(t *testing.T) {
		if n, err := f.usage.UserNames(ctx, bID()); err != nil || len(n) != 0 {
			t.Errorf("Got(UserNames of B) = %v, %v; want none (only A has usage)", n, err)
		}
	})
	// B's own volume is billed to B: B's cost is its volume storage only.
	bVolumeCost := func(t *testing.T) usage.Money {
		vc, err := f.usage.VolumeCharges(ctx, bID(), rng)
		noErr(t, "VolumeCharges", err)
		var m usage.Money
		for _, c := range vc {
			m = m.Add(c.Cost)
		}
		return m
	}
	add("usage.Store.VolumeCharges", func(t *testing.T) {
		vc, err := f.usage.VolumeCharges(ctx, bID(), rng)
		noErr(t, "VolumeCharges", err)
		var aVolumes []string
		if err := f.db.Table("volumes").Where("tenant_id = ?", a.tenant.ID).Pluck("id", &aVolumes).Error; err != nil || len(aVolumes) == 0 {
			t.Fatalf("Got(A's volume ids) = %v, %v; want A's volume", aVolumes, err)
		}
		for _, c := range vc {
			if c.TenantID != bID() || slices.Contains(aVolumes, c.VolumeID) {
				t.Errorf("Got(a volume charge of B) = %+v; want only B's own volumes", c)
			}
		}
	})
	add("usage.Store.Totals", func(t *testing.T) {
		tot, err := f.usage.Totals(ctx, bID(), rng)
		if err != nil || !reflect.ValueOf(tot.Sums).IsZero() || tot.Cost.Cmp(bVolumeCost(t)) > 0 {
			t.Errorf("Got(Totals of B) = %+v, %v; want zero usage and at most B's volume storage (only A has usage)", tot, err)
		}
	})
	add("usage.Store.Daily", func(t *testing.T) {
		days, err := f.usage.Daily(ctx, bID(), rng)
		noErr(t, "Daily", err)
		var cost usage.Money
		for _, d := range days {
			if !reflect.ValueOf(d.Sums).IsZero() {
				t.Errorf("Got(a day of B) = %+v; want zero usage (only A has usage)", d)
			}
			cost = cost.Add(d.Cost)
		}
		if cost.Cmp(bVolumeCost(t)) > 0 {
			t.Errorf("Got(B's daily cost) = %s; want at most B's volume storage", cost)
		}
	})
	add("usage.Store.MonthToDate", func(t *testing.T) {
		for _, at := range []time.Time{rng.From, rng.To} {
			m, err := f.usage.MonthToDate(ctx, bID(), at)
			noErr(t, "MonthToDate", err)
			// B's cost is its own volume storage only.
			if m.Total.Cost.Cmp(bVolumeCost(t)) > 0 || !m.Previous.Cost.IsZero() || !reflect.ValueOf(m.Total.Sums).IsZero() {
				t.Errorf("Got(month to date of B at %s) = %+v; want zero usage, at most B's volume storage (only A has usage)", at, m.Total)
			}
		}
	})
	add("usage.Store.Top", func(t *testing.T) {
		lines, err := f.usage.Top(ctx, bID(), rng, usage.BySandbox, 10)
		empty(t, "Top", lines, err)
	})
	add("usage.Store.CPUSecondsThisMonth", func(t *testing.T) {
		if s, err := f.usage.CPUSecondsThisMonth(ctx, bID()); s != 0 || err != nil {
			t.Errorf("Got(CPUSecondsThisMonth of B) = %v, %v; want 0", s, err)
		}
	})
	add("usage.Store.SetPrice", func(t *testing.T) {
		p, err := f.usage.SetPrice(ctx, b.actor, usage.Price{TenantID: bID(), Currency: "EUR", VCPUSecond: 0.00001, GiBSecond: 0.000001})
		if err != nil || p.TenantID != bID() {
			t.Errorf("Got(SetPrice of B) = %+v, %v; want B's own price", p, err)
		}
	})
	list("usage.Store.PriceHistory", func() (any, error) { return f.usage.PriceHistory(ctx, bID()) })
	add("usage.Store.Export", func(t *testing.T) {
		var buf strings.Builder
		res, err := f.usage.Export(ctx, &buf, usage.ExportQuery{TenantID: bID(), Range: rng, Format: "json"})
		if err != nil || res.LedgerRows != 0 || strings.Count(buf.String(), `"SkuId":"volume-storage"`) != int(res.Rows) {
			t.Errorf("Got(Export of B) = %+v, %v; want only B's own volume storage rows (only A has usage)", res, err)
		}
		f.noneOfA(t, "Export", buf.String())
	})

	// workflow.Store
	missing("workflow.Store.Current", func() error { _, err := f.workflow.Current(ctx, bID(), a.workflow.Name); return err })
	missing("workflow.Store.Get", func() error { _, err := f.workflow.Get(ctx, bID(), a.workflow.Name, a.workflow.Version); return err })
	list("workflow.Store.List", func() (any, error) { return f.workflow.List(ctx, bID()) })
	add("workflow.Store.History", func(t *testing.T) {
		vs, err := f.workflow.History(ctx, bID(), a.workflow.Name)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(History of A's workflow as B) = %v; want none or not found", err)
		}
		empty(t, "History", vs, nil)
	})
	add("workflow.Store.Save", func(t *testing.T) {
		v, err := f.workflow.Save(ctx, b.actor, bID(), []byte(a.workflow.Source), nil)
		if err != nil || v.TenantID != bID() || v.Version != 1 {
			t.Errorf("Got(Save in B of A's workflow source) = %+v, %v; want version 1 of B's own", v, err)
		}
		noErr(t, "Delete it", f.workflow.Delete(ctx, b.actor, bID(), v.Name))
	})
	missing("workflow.Store.Delete", func() error { return f.workflow.Delete(ctx, b.actor, bID(), a.workflow.Name) })
	list("workflow.Store.Settings", func() (any, error) { return f.workflow.Settings(ctx, bID()) })
	add("workflow.Store.SetGitHubSecret", func(t *testing.T) {
		_, err := f.workflow.SetGitHubSecret(ctx, b.actor, bID(), b.secret)
		noErr(t, "SetGitHubSecret", err)
	})

	// integrations.Store
	add("integrations.Store.Create", func(t *testing.T) {
		ep, err := f.hooks.Create(ctx, b.actor, bID(), integrations.NewEndpoint{URL: "https://hooks." + b.tenant.Slug + ".example.com/two", SecretName: b.secret})
		noErr(t, "Create", err)
		noErr(t, "Delete it", f.hooks.Delete(ctx, b.actor, bID(), ep.ID))
	})
	list("integrations.Store.Endpoints", func() (any, error) { return f.hooks.Endpoints(ctx, bID()) })
	missing("integrations.Store.Endpoint", func() error { _, err := f.hooks.Endpoint(ctx, bID(), a.endpointID); return err })
	missing("integrations.Store.SetEnabled", func() error { _, err := f.hooks.SetEnabled(ctx, b.actor, bID(), a.endpointID, false); return err })
	missing("integrations.Store.Delete", func() error { return f.hooks.Delete(ctx, b.actor, bID(), a.endpointID) })
	add("integrations.Store.Deliveries", func(t *testing.T) {
		ds, err := f.hooks.Deliveries(ctx, bID(), a.endpointID, 100)
		empty(t, "Deliveries of A's endpoint", ds, err)
	})
	missing("integrations.Store.Delivery", func() error { _, err := f.hooks.Delivery(ctx, bID(), a.hookDeliv); return err })
	add("integrations.Store.Add", func(t *testing.T) {
		noErr(t, "Add", f.db.Transaction(func(tx *gorm.DB) error {
			return f.hooks.Add(tx, bID(), integrations.EventTest, map[string]any{"endpoint_id": a.endpointID})
		}))
	})
	missing("integrations.Store.SendTest", func() error { _, err := f.hooks.SendTest(ctx, b.actor, bID(), a.endpointID); return err })

	// egress.Store
	add("egress.Store.Record", func(t *testing.T) {
		noErr(t, "Record", f.egress.Record(ctx, &egress.Event{TenantID: bID(), SandboxID: a.sandbox.ID, Method: "CONNECT", Host: "x.test", Port: 443,
			Decision: egress.DecisionAllow, Rule: "isolation", StartedAt: time.Now(), BytesUp: 5, BytesDown: 7}))
	})
	add("egress.Store.Meter", func(t *testing.T) {
		noErr(t, "Meter", f.egress.Meter(ctx, bID(), a.sandbox.ID, 11, 13, time.Now()))
	})
	add("egress.Store.Events", func(t *testing.T) {
		evs, err := f.egress.Events(ctx, bID(), egress.Filter{})
		noErr(t, "Events", err)
		for _, e := range evs {
			if e.ID == a.egressID {
				t.Errorf("Got(Events of B) has A's event %s; want none of A's", e.ID)
			}
		}
	})
	add("egress.Store.SandboxTotals", func(t *testing.T) {
		tot, err := f.egress.SandboxTotals(ctx, bID(), b.sandbox.ID)
		noErr(t, "SandboxTotals", err)
		f.noneOfA(t, "SandboxTotals", tot)
		aTot := must(f.egress.SandboxTotals(ctx, a.tenant.ID, a.sandbox.ID))(t, "A's totals")
		if tb := must(f.egress.SandboxTotals(ctx, bID(), a.sandbox.ID))(t, "B on A's sandbox"); reflect.DeepEqual(tb, aTot) && !reflect.ValueOf(aTot).IsZero() {
			t.Errorf("Got(SandboxTotals of A's sandbox as B) = A's %+v; want B's own (nothing of A)", tb)
		}
	})

	// runs.Store
	missing("runs.Store.Create", func() error {
		_, err := f.runs.Create(ctx, b.actor, bID(), runs.NewRun{Version: a.workflow, Trigger: runs.Trigger{Kind: runs.TriggerManual}})
		return err
	})
	add("runs.Store.Deliver", func(t *testing.T) {
		_, err := f.runs.Deliver(ctx, b.actor, bID(), a.delivery, nil)
		noErr(t, "Deliver A's delivery id and body to B (no cross-tenant duplicate)", err)
	})
	missing("runs.Store.Get", func() error { _, _, err := f.runs.Get(ctx, bID(), a.runID); return err })
	add("runs.Store.List", func(t *testing.T) {
		rs, err := f.runs.List(ctx, bID(), runs.Filter{})
		noErr(t, "List", err)
		f.noneOfA(t, "List", rs)
		rs, err = f.runs.List(ctx, bID(), runs.Filter{Workflow: a.workflow.Name})
		empty(t, "List of A's workflow", rs, err)
	})

	add("runs.Store.Activity", func(t *testing.T) {
		now := time.Now()
		act, err := f.runs.Activity(ctx, bID(), now.AddDate(0, 0, -1), now, 10)
		noErr(t, "Activity", err)
		own, err := f.runs.List(ctx, bID(), runs.Filter{})
		noErr(t, "List", err)
		if act.Runs != len(own) {
			t.Errorf("Got(runs of B per day) = %d; want B's own %d", act.Runs, len(own))
		}
		f.noneOfA(t, "Activity", act)
	})
	add("sandbox.Store.DailyCreated", func(t *testing.T) {
		now := time.Now()
		days, err := f.sandbox.DailyCreated(ctx, bID(), now.AddDate(0, 0, -1), now)
		noErr(t, "DailyCreated", err)
		own, err := f.sandbox.Sandboxes(ctx, bID())
		noErr(t, "Sandboxes", err)
		n := 0
		for _, d := range days {
			n += d.Created
		}
		if n != len(own) {
			t.Errorf("Got(sandboxes of B per day) = %d; want B's own %d", n, len(own))
		}
	})

	// sandbox.Store
	missing("sandbox.Store.Sandbox", func() error { _, err := f.sandbox.Sandbox(ctx, bID(), a.sandbox.ID); return err })
	list("sandbox.Store.Sandboxes", func() (any, error) { return f.sandbox.Sandboxes(ctx, bID()) })
	missing("sandbox.Store.ByIdempotencyKey", func() error { _, err := f.sandbox.ByIdempotencyKey(ctx, bID(), a.userEmail, a.idemKey); return err })
	add("sandbox.Store.WithIdempotencyKey", func(t *testing.T) {
		sbs, err := f.sandbox.WithIdempotencyKey(ctx, bID(), a.idemKey)
		empty(t, "WithIdempotencyKey", sbs, err)
	})
	add("sandbox.Store.Events", func(t *testing.T) {
		evs, err := f.sandbox.Events(ctx, bID(), a.sandbox.ID)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(Events of A's sandbox as B) = %v; want none or not found", err)
		}
		empty(t, "Events", evs, nil)
	})
	add("sandbox.Store.Execs", func(t *testing.T) {
		xs, err := f.sandbox.Execs(ctx, bID(), a.sandbox.ID)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(Execs of A's sandbox as B) = %v; want none or not found", err)
		}
		empty(t, "Execs", xs, nil)
	})
	add("sandbox.Store.Processes", func(t *testing.T) {
		ps, err := f.sandbox.Processes(ctx, bID(), a.sandbox.ID)
		empty(t, "Processes of A's sandbox", ps, err)
	})
	missing("sandbox.Store.ProcessByPID", func() error { _, err := f.sandbox.ProcessByPID(ctx, bID(), a.sandbox.ID, 42); return err })

	// terminal.Store
	missing("terminal.Store.Session", func() error { _, err := f.terms.Session(ctx, bID(), a.termID); return err })
	add("terminal.Store.Sessions", func(t *testing.T) {
		ss, err := f.terms.Sessions(ctx, bID(), a.sandbox.ID)
		empty(t, "Sessions of A's sandbox", ss, err)
		ss, err = f.terms.Sessions(ctx, bID(), "")
		noErr(t, "Sessions", err)
		f.noneOfA(t, "Sessions", ss)
	})

	// vmpool.Store
	list("vmpool.Store.Pool", func() (any, error) { return f.vms.Pool(ctx, bID()) })
	add("vmpool.Store.SetPool", func(t *testing.T) {
		_, err := f.vms.SetPool(ctx, b.actor, bID(), vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 512, MaxVMs: 3})
		noErr(t, "SetPool", err)
	})
	missing("vmpool.Store.CreateVM", func() error {
		_, err := f.vms.CreateVM(ctx, b.actor, bID(), vmpool.NewVM{HostURI: "test:///" + b.tenant.Slug, Replaces: a.vmID})
		return err
	})
	missing("vmpool.Store.VM", func() error { _, err := f.vms.VM(ctx, bID(), a.vmID); return err })
	list("vmpool.Store.VMs", func() (any, error) { return f.vms.VMs(ctx, bID()) })
	list("vmpool.Store.HostConstraint", func() (any, error) { return f.vms.HostConstraint(ctx, bID()) })
	add("vmpool.Store.SetHostConstraint", func(t *testing.T) {
		_, err := f.vms.SetHostConstraint(ctx, b.actor, bID(), vmpool.Labels{"dedicated": "bravo"})
		noErr(t, "SetHostConstraint", err)
	})

	// compliance.Service
	list("compliance.Service.Items", func() (any, error) { return f.compliance.Items(ctx, bID()) })
	list("compliance.Service.Evaluate", func() (any, error) { return f.compliance.Evaluate(ctx, bID()) })
	add("compliance.Service.RunProbe", func(t *testing.T) {
		// No sandboxes here: the probe of B cannot run, and touches nothing of A.
		if run, err := f.compliance.RunProbe(ctx, b.actor, bID()); err == nil {
			f.noneOfA(t, "RunProbe", run)
		}
	})
	list("compliance.Service.Incident", func() (any, error) { return f.compliance.Incident(ctx, bID()) })
	list("compliance.Service.History", func() (any, error) { return f.compliance.History(ctx, bID(), 100) })
	list("compliance.Service.ProbeRuns", func() (any, error) { return f.compliance.ProbeRuns(ctx, bID(), 100) })
	missing("compliance.Service.ProbeRun", func() error { _, err := f.compliance.ProbeRun(ctx, bID(), a.probeID); return err })
	return out
}

// handshake runs a TLS handshake over a pipe: the server with cfg, a
// client trusting roots and asking for name.
func handshake(cfg *tls.Config, roots *x509.CertPool, name string) error {
	cc, sc := net.Pipe()
	defer cc.Close()
	defer sc.Close()
	srv := tls.Server(sc, cfg)
	done := make(chan error, 1)
	go func() { done <- srv.HandshakeContext(ctx); sc.Close() }()
	err := tls.Client(cc, &tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12}).HandshakeContext(ctx)
	cc.Close()
	<-done
	return err
}
