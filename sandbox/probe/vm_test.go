package probe_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/probe"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

var testRoot = []byte("0123456789abcdef0123456789abcdef-probe-test")

// names resolves the test's host names; anything else does not exist.
type names map[string][]netip.Addr

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// complianceEnv is a deployment as `stockade serve` wires it, on real VMs:
// policies, secrets, the egress gateway (allowed to reach 127.0.0.0/8, the
// test-only operator allowance, with "internet.test" resolving to a local
// upstream), sandboxes, and the compliance service probing through them.
type complianceEnv struct {
	db          *gorm.DB
	pol         *policy.Store
	sbx         *sandbox.Service
	svc         *compliance.Service
	live        *probe.Live
	tenant      string
	other       string
	upHits      atomic.Int32
	controlHits atomic.Int32
}

// newComplianceEnv starts the deployment; with grant, the tenant holds a
// secret its policy gives every sandbox (as a placeholder).
func newComplianceEnv(t *testing.T, template string, grant bool) *complianceEnv {
	t.Helper()
	dataDir := sandboxtest.NeedVMs(t, template)
	ctx := context.Background()
	db := dbtest.SQLite(t)
	e := &complianceEnv{db: db}
	actor := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	ts := tenants.NewStore(db, nil)
	for i, slug := range []string{"probe-a", "probe-b"} {
		ten, err := ts.CreateTenant(ctx, actor, slug, slug)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			e.tenant = ten.ID
		} else {
			e.other = ten.ID
		}
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.upHits.Add(1)
		fmt.Fprintf(w, "hello from the internet upstream %s\n", r.URL.Path)
	}))
	t.Cleanup(up.Close)
	_, upPort, _ := net.SplitHostPort(up.Listener.Addr().String())
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.controlHits.Add(1)
		fmt.Fprintln(w, "stockade control plane")
	}))
	t.Cleanup(control.Close)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	if e.pol, err = policy.NewStore(db, nil); err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(db, testRoot, secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if grant {
		if _, err := sec.Create(ctx, actor, e.tenant, secrets.NewSecret{Name: "GH_TOKEN", Value: "ghp_real-token-never-in-a-sandbox",
			Hosts: []string{"internet.test"}, TTL: 24 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		doc := policy.Defaults()
		doc.Credentials.Secrets = []string{"GH_TOKEN"}
		if _, err := e.pol.Save(ctx, actor, e.tenant, policy.Edit{Doc: doc, Reason: "give agents the GitHub token"}); err != nil {
			t.Fatal(err)
		}
	}
	gw := &sandboxtest.LateGateway{}
	var vms *vmpool.Service
	vms, e.sbx = sandboxtest.Start(t, db, vmpool.Config{DataDir: dataDir, Logger: log, Egress: gw},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, DefaultTemplate: "busybox", Policies: e.pol, Credentials: sec})
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	g, err := egress.New(egress.Config{Policies: egress.FromPolicy(e.pol), Store: egress.NewStore(db), Swapper: sec,
		Sandboxes: egress.StoredSandboxes(e.sbx.Store()), AllowCIDRs: allow, Logger: log,
		Resolver: names{"internet.test": {netip.MustParseAddr("127.0.0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	gw.Set(g)
	if _, err := vms.SetPool(ctx, actor, e.tenant, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 768, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	runner := probe.NewRunner(e.sbx, probe.Config{Template: template, Policies: e.pol, Logger: log, Targets: probe.Targets{
		Internet:       "internet.test:" + upPort,
		InternetDirect: "10.0.2.2:" + upPort,
		Private:        []string{"10.0.2.2:" + upPort, "192.168.0.1:80"},
		ControlPlane:   probe.HostPort(control.URL),
	}})
	e.live = probe.NewLive(db, nil)
	hostShares, vmNICs, err := probe.DomainShares()
	if err != nil {
		t.Fatal(err)
	}
	e.svc, err = compliance.New(db, compliance.Config{
		Policies: e.pol, Secrets: sec, Tenants: onlyTenant{ts, e.tenant}, Live: e.live, Prober: runner,
		Platform: compliance.Platform{HostMounts: hostShares, NetworkDevices: vmNICs, Gateway: true, SecretsEncrypted: true, AllowCIDRs: []string{"127.0.0.0/8"},
			OperatorContacts: []string{"ops@example.test"}, ControlPlane: control.URL,
			IncidentContacts: []string{"oncall@example.test"}, IncidentRunbookURL: "https://runbooks.example.test/agent-compromise"},
		// The first probe comes from the schedule, at the first tick.
		Interval: time.Second, ProbeInterval: time.Hour, FirstProbeAfter: time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.svc.Close() })
	return e
}

// onlyTenant is the tenant store seen through a filter: the cycle
// evaluates and probes the test's first tenant only (the other exists for
// the isolation check and has no VM pool of its own).
type onlyTenant struct {
	*tenants.Store
	id string
}

func (o onlyTenant) ListTenants(ctx context.Context) ([]tenants.TenantSummary, error) {
	all, err := o.Store.ListTenants(ctx)
	var out []tenants.TenantSummary
	for _, t := range all {
		if t.ID == o.id {
			out = append(out, t)
		}
	}
	return out, err
}

func itemOf(items []compliance.Item, id string) compliance.Item {
	for _, it := range items {
		if it.ID == id {
			return it
		}
	}
	return compliance.Item{}
}

func checkOf(t *testing.T, run compliance.ProbeRun, id string) compliance.ProbeCheck {
	t.Helper()
	c, ok := run.Check(id)
	if !ok {
		t.Fatalf("Got(run checks) = %+v; want %s\n%s", run.Checks, id, run.Output)
	}
	return c
}

// waitEvaluated waits for the evaluation that follows a run's record: the
// run is stored as ended first, then the checklist is evaluated from it.
func (e *complianceEnv) waitEvaluated(t *testing.T, run compliance.ProbeRun) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		items, err := e.svc.Items(context.Background(), e.tenant)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range itemOf(items, compliance.ItemFilesystemPermissions).Evidence {
			if ev.Link == "/compliance/probes/"+run.ID {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Got(items) = %+v 2 min after run %s ended; want them evaluated from it", items, run.ID)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scheduled waits for the cycle's first probe run of the tenant to end.
func (e *complianceEnv) scheduled(t *testing.T) compliance.ProbeRun {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		runs, err := e.svc.ProbeRuns(ctx, e.tenant, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) > 0 && runs[len(runs)-1].State != compliance.RunRunning {
			run := runs[len(runs)-1]
			t.Logf("scheduled probe run %s: %s in %v", run.ID, run.State, run.EndedAt.Sub(run.StartedAt).Round(time.Millisecond))
			e.waitEvaluated(t, run)
			return e.checkRun(t, run)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Got(ProbeRuns) = %+v after 10 min; want the scheduled run ended", runs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *complianceEnv) probe(t *testing.T) compliance.ProbeRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	begin := time.Now()
	run, err := e.svc.RunProbe(ctx, audit.Actor{Kind: audit.ActorUser, ID: "u-sec", Name: "Sam Security"}, e.tenant)
	if err != nil {
		t.Fatalf("RunProbe() = %v", err)
	}
	t.Logf("probe run %s: %s in %v", run.ID, run.State, time.Since(begin).Round(time.Millisecond))
	return e.checkRun(t, run)
}

// checkRun checks that run completed and left no sandbox behind.
func (e *complianceEnv) checkRun(t *testing.T, run compliance.ProbeRun) compliance.ProbeRun {
	t.Helper()
	ctx := context.Background()
	if testing.Verbose() {
		t.Logf("probe output:\n%s", run.Output)
	}
	if run.State != compliance.RunCompleted {
		t.Fatalf("Got(run state) = %s; want completed\n%s", run.State, run.Output)
	}
	if !strings.Contains(run.Output, "# sandbox "+run.SandboxID+" destroyed") {
		t.Errorf("Got(run output) = %q; want it to end with the probe sandbox destroyed", run.Output)
	}
	// The probe's sandboxes are gone, whatever the run found.
	sb, err := e.live.Sandbox(ctx, e.tenant, run.SandboxID)
	if err != nil || sb.State != string(sandbox.StateDestroyed) {
		t.Errorf("Got(probe sandbox %s) = %+v, %v; want destroyed", run.SandboxID, sb, err)
	}
	list, err := e.sbx.List(ctx, e.tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.State.Active() {
			t.Errorf("Got(sandbox %s) = %s after the run; want every probe sandbox ended", s.ID, s.State)
		}
	}
	return run
}

func TestVMComplianceProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs")
	}
	e := newComplianceEnv(t, image.TemplateBusybox, false)
	ctx := context.Background()

	run := e.scheduled(t)
	for _, n := range compliance.CheckNames() {
		if c := checkOf(t, run, n.ID); c.Outcome != compliance.OutcomeBlocked {
			t.Errorf("Got(%s) = %s (%s); want blocked under the strict policy", n.ID, c.Outcome, c.Detail)
		}
	}
	if t.Failed() {
		t.Logf("probe output:\n%s", run.Output)
	}
	if e.upHits.Load() != 0 || e.controlHits.Load() != 0 {
		t.Errorf("Got(upstream hits, control plane hits) = %d, %d; want none under the strict policy", e.upHits.Load(), e.controlHits.Load())
	}
	items, err := e.svc.Items(ctx, e.tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		backed := false
		for _, ev := range it.Evidence {
			backed = backed || ev.Link == "/compliance/probes/"+run.ID
		}
		if it.Status != compliance.StatusPass || !backed {
			t.Errorf("Got(%s) = %s, backed by the probe run %v: %+v; want pass, backed", it.ID, it.Status, backed, it.Evidence)
		}
	}
	if testing.Verbose() {
		for _, it := range items {
			t.Logf("%s: %s since %s", it.ID, it.Status, it.Since.Format(time.RFC3339))
			for _, ev := range it.Evidence {
				t.Logf("    [%s] %s -> %s", ev.Kind, ev.Text, ev.Link)
			}
		}
	}
	strictSince := itemOf(items, compliance.ItemEgressRestricted).Since

	t.Run("weakened policy turns items within one cycle", func(t *testing.T) {
		doc := policy.Defaults()
		doc.Network.Egress.Default = policy.EgressAllow
		doc.Lifetime.MaxTimeoutSeconds, doc.Lifetime.DefaultTimeoutSeconds = 604800, 604800
		v, err := e.pol.Save(ctx, audit.Actor{Kind: audit.ActorUser, ID: "u-adm", Name: "Ada"}, e.tenant, policy.Edit{Doc: doc, Reason: "open egress, no time limit"})
		if err != nil {
			t.Fatal(err)
		}
		changed := time.Now()
		cycle := e.svc.Config().Interval
		for {
			items, err = e.svc.Items(ctx, e.tenant)
			if err != nil {
				t.Fatal(err)
			}
			eg, tl := itemOf(items, compliance.ItemEgressRestricted), itemOf(items, compliance.ItemTimeLimits)
			if eg.Status == compliance.StatusFail && tl.Status == compliance.StatusWarn {
				t.Logf("egress fail, time limits warn %v after the change", time.Since(changed).Round(time.Millisecond))
				if !eg.Since.After(strictSince) {
					t.Errorf("Got(egress since) = %v; want after %v", eg.Since, strictSince)
				}
				if eg.Evidence[0].Link != fmt.Sprintf("/policy/versions/%d", v.Version) {
					t.Errorf("Got(egress evidence) = %+v; want a link to policy version %d", eg.Evidence[0], v.Version)
				}
				break
			}
			// One cycle, plus the time an evaluation takes.
			if time.Since(changed) > cycle+5*time.Second {
				t.Fatalf("Got(egress, time limits) = %s, %s %v after the change; want fail, warn within one %v cycle",
					eg.Status, tl.Status, time.Since(changed).Round(time.Millisecond), cycle)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if it := itemOf(items, compliance.ItemProductionAccess); it.Status != compliance.StatusWarn {
			t.Errorf("Got(production_access) = %s %+v; want warn: the operator allowance is now reachable by policy", it.Status, it.Evidence)
		}
		hist, err := e.svc.History(ctx, e.tenant, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range hist {
			seen[c.ItemID+" "+string(c.From)+">"+string(c.To)] = true
		}
		for _, want := range []string{"egress_restricted pass>fail", "time_limits pass>warn"} {
			if !seen[want] {
				t.Errorf("Got(History) = %v; want %s", seen, want)
			}
		}
	})

	t.Run("the probe proves egress now reaches a local upstream", func(t *testing.T) {
		run2 := e.probe(t)
		for id, want := range map[string]string{
			compliance.CheckInternetProxy:     compliance.OutcomeEscaped,
			compliance.CheckControlPlaneProxy: compliance.OutcomeEscaped,
			compliance.CheckMetadataProxy:     compliance.OutcomeBlocked,
			compliance.CheckPrivateProxy:      compliance.OutcomeBlocked,
			compliance.CheckInternetDirect:    compliance.OutcomeBlocked,
			compliance.CheckLifetime:          compliance.OutcomeBlocked,
		} {
			if c := checkOf(t, run2, id); c.Outcome != want {
				t.Errorf("Got(%s) = %s (%s); want %s", id, c.Outcome, c.Detail, want)
			}
		}
		if c := checkOf(t, run2, compliance.CheckInternetProxy); !strings.Contains(c.Detail, "200") {
			t.Errorf("Got(internet_proxy detail) = %q; want the upstream's 200", c.Detail)
		}
		if e.upHits.Load() == 0 || e.controlHits.Load() == 0 {
			t.Errorf("Got(upstream hits, control plane hits) = %d, %d; want both reached", e.upHits.Load(), e.controlHits.Load())
		}
		items, err := e.svc.Items(ctx, e.tenant)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{compliance.ItemEgressRestricted, compliance.ItemProductionAccess} {
			it := itemOf(items, id)
			escaped := false
			for _, ev := range it.Evidence {
				escaped = escaped || (strings.Contains(ev.Text, "ESCAPED") && ev.Link == "/compliance/probes/"+run2.ID)
			}
			if it.Status != compliance.StatusFail || !escaped {
				t.Errorf("Got(%s) = %s %+v; want fail with the probe's escape as evidence", id, it.Status, it.Evidence)
			}
		}
		runs, err := e.svc.ProbeRuns(ctx, e.tenant, 0)
		if err != nil || len(runs) != 2 || runs[0].ID != run2.ID {
			t.Errorf("Got(ProbeRuns) = %d runs, %v; want 2, newest first", len(runs), err)
		}
		if _, err := e.svc.ProbeRun(ctx, e.other, run2.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Got(ProbeRun of another tenant) = %v; want ErrNotFound", err)
		}
		evs, err := audit.NewLog(e.db, nil).List(ctx, e.tenant, audit.Filter{Type: audit.TypeComplianceProbeRun})
		if err != nil || len(evs) != 2 || evs[0].ActorName != "Sam Security" || evs[1].ActorID != compliance.SystemActor().ID {
			t.Errorf("Got(compliance.probe_run events) = %+v, %v; want the scheduled one, then one by Sam Security", evs, err)
		} else if esc, _ := evs[0].Details["escaped"].([]any); len(esc) < 2 {
			t.Errorf("Got(latest probe_run details) = %+v; want the escaped checks named", evs[0].Details)
		}
		changes, err := audit.NewLog(e.db, nil).List(ctx, e.tenant, audit.Filter{Type: audit.TypeComplianceStatusChanged})
		if err != nil || len(changes) < 2 {
			t.Errorf("Got(compliance.status_changed events) = %d, %v; want at least 2", len(changes), err)
		}
	})
}

// The production template (dash, coreutils, curl, bash, python3; no nc or
// wget): the probe must judge every check the same way there.
func TestVMComplianceProbeDebian(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs")
	}
	e := newComplianceEnv(t, image.TemplateDebian, true)
	run := e.scheduled(t)
	for _, n := range compliance.CheckNames() {
		if c := checkOf(t, run, n.ID); c.Outcome != compliance.OutcomeBlocked {
			t.Errorf("Got(%s) = %s (%s); want blocked under the strict policy", n.ID, c.Outcome, c.Detail)
		}
	}
	if c := checkOf(t, run, compliance.CheckCredentials); !strings.Contains(c.Detail, "only placeholders: variables GH_TOKEN") {
		t.Errorf("Got(credentials) = %q; want the granted GH_TOKEN seen as a placeholder only", c.Detail)
	}
	if strings.Contains(run.Output, "ghp_real-token") {
		t.Errorf("Got(probe output) holds the real token; want placeholders only")
	}
	items, err := e.svc.Items(context.Background(), e.tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Status != compliance.StatusPass {
			t.Errorf("Got(%s) = %s %+v; want pass", it.ID, it.Status, it.Evidence)
		}
	}
	if t.Failed() {
		t.Logf("probe output:\n%s", run.Output)
	}
}
