package runs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/cmd/stockade/app"
	ghreceiver "github.com/stockade-dev/stockade/handlers/github"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// The acceptance test of workflows, end to end, with nothing faked: a
// signed pull_request delivery in GitHub's format reaches the web app's
// webhook route; the run's debian sandbox on a real VM (TCG) clones the
// repository from a git server on 127.0.0.1 (git http-backend behind HTTP
// Basic auth) through the egress gateway, with a placeholder the gateway
// swaps for the real token; the repository's tests run; GitHub (a commit
// status and a comment), Slack and Jira are told, each by a local server
// that checks the request the way the real API would take it; and the
// sandbox is gone.

// e2eToken is the GitHub token: the git server and the GitHub API server
// want it; the sandbox must only ever see a placeholder.
const e2eToken = "ghp_E2eRealToken_4b1d9a7c3e5f2086"

// gitServer serves bare repositories under root with git http-backend over
// HTTPS on 127.0.0.1, for any user with password e2eToken, and the public
// ones to anyone.
type gitServer struct {
	*httptest.Server
	root   string
	mu     sync.Mutex
	auth   []string // what each request authenticated with: "real", "placeholder", "none", "other"
	public map[string]bool
}

func newGitServer(t *testing.T) *gitServer {
	t.Helper()
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git on the host (scripts/deps.sh installs it): %v", err)
	}
	g := &gitServer{root: t.TempDir(), public: map[string]bool{}}
	cgiHandler := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"}}
	g.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pass, ok := r.BasicAuth()
		seen := "none"
		switch {
		case ok && pass == e2eToken:
			seen = "real"
		case ok && strings.HasPrefix(pass, secrets.PlaceholderPrefix):
			seen = "placeholder"
		case ok:
			seen = "other"
		}
		g.mu.Lock()
		g.auth = append(g.auth, seen)
		public := false
		for repo := range g.public {
			public = public || strings.HasPrefix(r.URL.Path, "/"+repo+".git/")
		}
		g.mu.Unlock()
		if seen != "real" && !(public && seen == "none") {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		cgiHandler.ServeHTTP(w, r)
	}))
	g.Config.ErrorLog = log.New(io.Discard, "", 0)
	g.StartTLS()
	t.Cleanup(g.Close)
	return g
}

// publish lets anyone read repo, as GitHub does a public repository.
func (g *gitServer) publish(repo string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.public[repo] = true
}

func (g *gitServer) auths() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.auth...)
}

// git runs git in dir on the host.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Octo Cat", "GIT_AUTHOR_EMAIL=octocat@example.com",
		"GIT_COMMITTER_NAME=Octo Cat", "GIT_COMMITTER_EMAIL=octocat@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// repository makes owner/name on the server with a python project and its
// tests on main, and a branch with one more commit; it returns that
// commit's id.
func (g *gitServer) repository(t *testing.T, repo, branch string) string {
	t.Helper()
	return g.push(t, repo, branch, map[string]string{
		"calc.py": "def add(a, b):\n    return a + b\n",
		"test_calc.py": "import unittest\n\nimport calc\n\n\nclass CalcTest(unittest.TestCase):\n" +
			"    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n",
	}, map[string]string{"test_more.py": "import unittest\n\nimport calc\n\n\nclass MoreTest(unittest.TestCase):\n" +
		"    def test_negative(self):\n        self.assertEqual(calc.add(-2, 2), 0)\n"})
}

// push makes owner/name on the server with the files of main in one
// commit and those of branch in one more; it returns that commit's id.
func (g *gitServer) push(t *testing.T, repo, branch string, main, more map[string]string) string {
	t.Helper()
	bare := filepath.Join(g.root, repo+".git")
	git(t, g.root, "init", "-q", "--bare", "--initial-branch=main", bare)
	// GitHub serves any commit by id; so does this server.
	git(t, bare, "config", "uploadpack.allowAnySHA1InWant", "true")
	work := t.TempDir()
	git(t, work, "init", "-q", "--initial-branch=main")
	for i, files := range []map[string]string{main, more} {
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		git(t, work, "add", ".")
		if i == 0 {
			git(t, work, "commit", "-q", "-m", "first")
			git(t, work, "checkout", "-q", "-b", branch)
		} else {
			git(t, work, "commit", "-q", "-m", "ENG-42: more tests")
		}
	}
	git(t, work, "push", "-q", bare, "main", branch)
	return git(t, work, "rev-parse", "HEAD")
}

// apiRecorder is a local HTTP server standing in for an API: check says
// what is wrong with a request ("" when it is what the API takes).
type apiRecorder struct {
	*httptest.Server
	mu     sync.Mutex
	got    []string // "METHOD PATH" of the requests check accepted
	errors []string
}

func newAPI(t *testing.T, check func(r *http.Request, body []byte) (status int, answer string, problem string)) *apiRecorder {
	a := &apiRecorder{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		code, answer, problem := check(r, body)
		a.mu.Lock()
		if problem != "" {
			a.errors = append(a.errors, r.Method+" "+r.URL.Path+": "+problem)
		} else {
			a.got = append(a.got, r.Method+" "+r.URL.Path)
		}
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, answer)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *apiRecorder) requests() ([]string, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.got...), append([]string(nil), a.errors...)
}

// e2eEnv is one tenant on real VMs with the whole control plane: secrets
// with the credential gateway, the sandbox service, the run engine with
// notifications, and the web app serving the GitHub webhook.
type e2eEnv struct {
	db      *gorm.DB
	vms     *vmpool.Service
	svc     *sandbox.Service
	engine  *runs.Engine
	wf      *workflow.Store
	sec     *secrets.Store
	tenant  tenants.Tenant
	url     string // the web app
	gw      *egress.Gateway
	events  *egress.Store
	audit   *audit.Log
	logs    *lockedLog
	install string
}

// hostNames resolves the test's names for the gateway.
type hostNames map[string][]netip.Addr

func (n hostNames) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type e2eGateway struct{ e *e2eEnv }

func (g e2eGateway) Handler(tenantID, vmID string) agentproto.EgressHandler {
	return func(ctx context.Context, sandboxID string, conn net.Conn) {
		g.e.gw.ServeConn(ctx, tenantID, vmID, sandboxID, conn)
	}
}

// lockedLog collects the control plane's log lines.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const hookSecret = "It's a Secret to Everybody"

// e2eExtra is what a test adds to newE2E's environment: the templates its
// runs use beside debian, and hosts the policy allows beside the git host
// (each resolved to 127.0.0.1 by the gateway).
type e2eExtra struct {
	templates []string
	hosts     []string
}

func newE2E(t *testing.T, gitSrv *gitServer, gitHost string, github, slack, jira *apiRecorder, x e2eExtra) *e2eEnv {
	t.Helper()
	dataDir := sandboxtest.NeedVMs(t, append([]string{image.TemplateDebian}, x.templates...)...)
	e := &e2eEnv{db: dbtest.SQLite(t), logs: &lockedLog{}}
	e.audit = audit.NewLog(e.db, nil)
	ts := tenants.NewStore(e.db, nil)
	var err error
	if e.install, err = ts.InstallationID(bg); err != nil {
		t.Fatal(err)
	}
	sandboxtest.DestroyAtCleanup(t, e.db)
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	if e.tenant, err = ts.CreateTenant(bg, sys, "acme", "Acme"); err != nil {
		t.Fatal(err)
	}
	root := make([]byte, 32)
	rand.Read(root)
	if e.sec, err = secrets.New(e.db, root, secrets.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []secrets.NewSecret{
		// The GitHub token: for cloning (the git host, through the
		// gateway) and the REST API (127.0.0.1 here, from the host).
		{Name: "GH_TOKEN", Value: e2eToken, Hosts: []string{gitHost, "127.0.0.1"}},
		{Name: "GH_HOOK", Value: hookSecret, Hosts: []string{ghreceiver.SecretHost}},
		{Name: "SLACK_URL", Value: slack.URL + "/services/T0001/B0002/XXXXXXXX", Hosts: []string{"127.0.0.1"}},
		{Name: "JIRA_TOKEN", Value: "jira-api-token-e2e", Hosts: []string{"127.0.0.1"}},
	} {
		if _, err := e.sec.Create(bg, admin, e.tenant.ID, s); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(e.logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelWarn}))
	e.vms, err = vmpool.New(bg, e.db, vmpool.Config{URIs: []string{systemURI}, DataDir: dataDir, Logger: log, ConnectTimeout: 30 * time.Second,
		Egress: e2eGateway{e}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	if err := e.vms.Start(sctx); err != nil {
		e.vms.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { e.vms.Close() })
	e.svc = sandbox.New(e.db, e.vms, sandbox.Config{DataDir: dataDir, Logger: log, SyncInterval: 500 * time.Millisecond, SampleInterval: time.Second,
		DefaultTemplate: image.TemplateDebian, Credentials: e.sec})
	if err := e.svc.Start(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.svc.Close() })
	// The test-only allowance: the git server is on 127.0.0.1, reached by
	// a name only this gateway resolves there.
	gitRoots := x509.NewCertPool()
	gitRoots.AddCert(gitSrv.Certificate())
	e.events = egress.NewStore(e.db)
	allow, names := []egress.Rule{{Domain: gitHost}}, hostNames{gitHost: {netip.MustParseAddr("127.0.0.1")}}
	for _, h := range x.hosts {
		allow, names[h] = append(allow, egress.Rule{Domain: h}), []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	e.gw, err = egress.New(egress.Config{
		Policies: egress.PoliciesFunc(func(context.Context, string) (egress.Rules, int, error) {
			return egress.Rules{Default: egress.DefaultDeny, Allow: allow}, 1, nil
		}),
		Store: e.events, Sandboxes: egress.StoredSandboxes(e.svc.Store()), Swapper: e.sec, UpstreamRoots: gitRoots, Logger: log,
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:   names, Audit: e.audit,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.vms.SetPool(bg, sys, e.tenant.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, WarmVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	if e.wf, err = workflow.NewStore(e.db, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.wf.SetGitHubSecret(bg, admin, e.tenant.ID, "GH_HOOK"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	e.url = "http://" + srv.Listener.Addr().String()
	sender := notify.New(e.db, notify.HostScoped(e.sec), notify.Config{AllowPrivate: true, GitHubAPI: github.URL, SlackWebhookHost: "127.0.0.1",
		Backoff: []time.Duration{10 * time.Millisecond}, Logger: log})
	_, gitPort, _ := net.SplitHostPort(gitSrv.Listener.Addr().String())
	e.engine = runs.NewEngine(runs.NewStore(e.db, nil), e.wf, e.svc, runs.Config{Logger: log, Grace: 5 * time.Second,
		GitURL: "https://" + gitHost + ":" + gitPort, Notifier: runs.NotifyWith(sender, e.url), Costs: runs.LedgerCosts(usage.NewStore(e.db, nil))})
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(bg, 2*time.Minute)
		defer cancel()
		if err := e.engine.Close(cctx); err != nil {
			t.Errorf("close the engine: %v", err)
		}
	})
	wctx, wcancel := context.WithCancel(bg)
	a, err := app.New(wctx, app.Config{PublicURL: e.url, DataDir: dataDir, RootKey: root, Version: "test"},
		app.Options{DB: e.db, Log: log, VMs: e.vms, Sandboxes: e.svc, Secrets: e.sec, Workflows: e.wf, Runs: e.engine})
	if err != nil {
		wcancel()
		t.Fatal(err)
	}
	srv.Config.Handler = a.Handler()
	srv.Start()
	t.Cleanup(func() { wcancel(); srv.Close(); a.Close() })
	return e
}

// deliver posts a GitHub delivery to the tenant's webhook, signed with
// secret, and returns the answer.
func deliver(t *testing.T, base, slug, event, delivery string, secret, body []byte) (int, ghreceiver.Answer) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/hooks/github/"+slug, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/044aadd")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-GitHub-Hook-ID", "292430182")
	req.Header.Set("X-Hub-Signature-256", ghreceiver.Sign(secret, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST the %s delivery: %v", event, err)
	}
	defer resp.Body.Close()
	var a ghreceiver.Answer
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &a)
	return resp.StatusCode, a
}

// pullRequestPayload is a pull_request "opened" delivery as GitHub
// documents it (trimmed of the many URL fields nothing reads).
func pullRequestPayload(repo, branch, sha string, number int) []byte {
	owner, name, _ := strings.Cut(repo, "/")
	user := map[string]any{"login": "octocat", "id": 1, "type": "User"}
	repository := map[string]any{"id": 1296269, "node_id": "MDEwOlJlcG9zaXRvcnkxMjk2MjY5", "name": name, "full_name": repo, "private": true,
		"owner": map[string]any{"login": owner, "id": 2, "type": "Organization"}, "html_url": "https://github.com/" + repo,
		"clone_url": "https://github.com/" + repo + ".git", "default_branch": "main"}
	p := map[string]any{
		"action": "opened",
		"number": number,
		"pull_request": map[string]any{
			"url": "https://api.github.com/repos/" + repo + "/pulls/" + fmt.Sprint(number), "id": 1, "number": number, "state": "open",
			"title": "ENG-42: more tests", "user": user, "body": "Adds a test.", "draft": false,
			"head": map[string]any{"label": owner + ":" + branch, "ref": branch, "sha": sha, "user": user, "repo": repository},
			"base": map[string]any{"label": owner + ":main", "ref": "main", "sha": "0000000000000000000000000000000000000001", "user": user, "repo": repository},
		},
		"repository": repository,
		"sender":     user,
	}
	b, _ := json.Marshal(p)
	return b
}

// forkPullRequestPayload is pullRequestPayload from a fork: the head is a
// branch of fork, a repository that is a fork of repo.
func forkPullRequestPayload(repo, fork, branch, sha string, number int) []byte {
	var p map[string]any
	_ = json.Unmarshal(pullRequestPayload(repo, branch, sha, number), &p)
	owner, name, _ := strings.Cut(fork, "/")
	head := p["pull_request"].(map[string]any)["head"].(map[string]any)
	head["label"] = owner + ":" + branch
	head["repo"] = map[string]any{"id": 7777777, "name": name, "full_name": fork, "private": false, "fork": true,
		"owner": map[string]any{"login": owner, "id": 3, "type": "User"}, "clone_url": "https://github.com/" + fork + ".git"}
	p["sender"] = map[string]any{"login": owner, "id": 3, "type": "User"}
	b, _ := json.Marshal(p)
	return b
}

// TestE2EPullRequestOnVM is the acceptance test of workflows.
func TestE2EPullRequestOnVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	const (
		repo    = "acme/app"
		branch  = "feature/eng-42-more-tests"
		gitHost = "git.example.com" // httptest's certificate names *.example.com
		number  = 42
	)
	gitSrv := newGitServer(t)
	sha := gitSrv.repository(t, repo, branch)

	// GitHub's REST API as it takes a commit status and a comment.
	var (
		stMu     sync.Mutex
		statuses []string // the states posted, in order
	)
	github := newAPI(t, func(r *http.Request, body []byte) (int, string, string) {
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+e2eToken ||
			r.Header.Get("Accept") != "application/vnd.github+json" || r.Header.Get("Content-Type") != "application/json" {
			return 401, `{"message":"Bad credentials"}`, fmt.Sprintf("method %s, auth real=%v, accept %q", r.Method,
				r.Header.Get("Authorization") == "Bearer "+e2eToken, r.Header.Get("Accept"))
		}
		switch r.URL.Path {
		case "/repos/" + repo + "/statuses/" + sha:
			var st map[string]any
			if err := json.Unmarshal(body, &st); err != nil {
				return 422, `{"message":"Problems parsing JSON"}`, err.Error()
			}
			state, _ := st["state"].(string)
			ctxName, _ := st["context"].(string)
			target, _ := st["target_url"].(string)
			desc, _ := st["description"].(string)
			if (state != "pending" && state != "success") || ctxName != "stockade/pr-tests" || !strings.HasPrefix(target, "http://") ||
				desc == "" || len(desc) > 140 {
				return 422, `{"message":"Validation Failed"}`, "status " + string(body)
			}
			stMu.Lock()
			statuses = append(statuses, state)
			stMu.Unlock()
			return 201, `{"id":1,"state":"` + state + `"}`, ""
		case fmt.Sprintf("/repos/%s/issues/%d/comments", repo, number):
			var c map[string]any
			if err := json.Unmarshal(body, &c); err != nil || c["body"] == "" || c["body"] == nil {
				return 422, `{"message":"Validation Failed"}`, "comment " + string(body)
			}
			return 201, `{"id":1}`, ""
		}
		return 404, `{"message":"Not Found"}`, "unknown path"
	})
	// Slack's incoming webhook: JSON with text, on the webhook's path.
	slack := newAPI(t, func(r *http.Request, body []byte) (int, string, string) {
		var m map[string]any
		if r.Method != http.MethodPost || r.URL.Path != "/services/T0001/B0002/XXXXXXXX" || json.Unmarshal(body, &m) != nil {
			return 400, "invalid_payload", "not a Slack message: " + string(body)
		}
		if text, _ := m["text"].(string); !strings.Contains(text, "pr-tests") || !strings.Contains(text, "succeeded") {
			return 400, "invalid_payload", "text " + string(body)
		}
		return 200, "ok", ""
	})
	// Jira Cloud REST v3: a comment in Atlassian Document Format on the
	// issue key from the branch, with the email and API token.
	jira := newAPI(t, func(r *http.Request, body []byte) (int, string, string) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != "ci@acme.example" || pass != "jira-api-token-e2e" {
			return 401, `{"errorMessages":["unauthorized"]}`, "auth"
		}
		if r.Method != http.MethodPost || r.URL.Path != "/rest/api/3/issue/ENG-42/comment" {
			return 404, `{"errorMessages":["Issue does not exist"]}`, "path"
		}
		var c struct {
			Body struct {
				Type    string           `json:"type"`
				Version int              `json:"version"`
				Content []map[string]any `json:"content"`
			} `json:"body"`
		}
		if err := json.Unmarshal(body, &c); err != nil || c.Body.Type != "doc" || c.Body.Version != 1 || len(c.Body.Content) == 0 {
			return 400, `{"errorMessages":["INVALID_INPUT"]}`, "not ADF: " + string(body)
		}
		return 201, `{"id":"10000"}`, ""
	})

	e := newE2E(t, gitSrv, gitHost, github, slack, jira, e2eExtra{})
	if _, err := e.wf.Save(bg, admin, e.tenant.ID, []byte(`name: pr-tests
triggers: [{event: pull_request}]
repositories: [`+repo+`]
sandbox: {template: debian, memory_mib: 256}
timeout_seconds: 600
steps:
  - name: test
    run: cd "$STOCKADE_CHECKOUT_DIR" && git log -1 --format='at %H' && python3 -m unittest -v 2>&1
  - name: placeholder only
    run: |
      case "$GH_TOKEN" in stockade-placeholder-GH_TOKEN-*) echo placeholder in env;; esac
      cd "$STOCKADE_CHECKOUT_DIR" && ! grep -ri 'authorization\|extraheader\|x-access-token\|placeholder' .git/config && echo clean
notify:
  github: {token_secret: GH_TOKEN}
  slack: {webhook_url_secret: SLACK_URL}
  jira: {site: "`+jira.URL+`", email: ci@acme.example, token_secret: JIRA_TOKEN, project: ENG}
`), nil); err != nil {
		t.Fatalf("save the workflow: %v", err)
	}
	body := pullRequestPayload(repo, branch, sha, number)
	delivery := uuid.NewString()
	countRuns := func() int {
		rs, err := e.engine.Store().List(bg, e.tenant.ID, runs.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}

	t.Run("a bad signature gets 401 and runs nothing", func(t *testing.T) {
		code, a := deliver(t, e.url, "acme", "pull_request", delivery, []byte("not the secret"), body)
		if code != http.StatusUnauthorized || a.Status != "unauthorized" {
			t.Errorf("Got(POST signed with another secret) = %d %+v; want 401 unauthorized", code, a)
		}
		if n := countRuns(); n != 0 {
			t.Errorf("Got(runs after a bad signature) = %d; want 0", n)
		}
	})
	t.Run("an unknown tenant gets 401, as a bad signature", func(t *testing.T) {
		if code, a := deliver(t, e.url, "no-such-tenant", "pull_request", uuid.NewString(), []byte(hookSecret), body); code != http.StatusUnauthorized || a.Status != "unauthorized" {
			t.Errorf("Got(POST to an unknown tenant) = %d %+v; want 401 unauthorized", code, a)
		}
	})

	code, a := deliver(t, e.url, "acme", "pull_request", delivery, []byte(hookSecret), body)
	if code != http.StatusAccepted || len(a.Runs) != 1 {
		t.Fatalf("Got(POST the pull_request delivery) = %d %+v; want 202 with one run", code, a)
	}
	runID := a.Runs[0]
	t.Run("a repeated delivery id makes one run", func(t *testing.T) {
		code, a := deliver(t, e.url, "acme", "pull_request", delivery, []byte(hookSecret), body)
		if code != http.StatusOK || a.Status != "duplicate" {
			t.Errorf("Got(POST the same delivery again) = %d %+v; want 200 duplicate", code, a)
		}
		if n := countRuns(); n != 1 {
			t.Errorf("Got(runs after a redelivery) = %d; want 1", n)
		}
	})

	// The run: a VM boot under TCG, a debian sandbox, a clone, the tests.
	r, steps := e.waitEnded(t, runID)
	if r.State != runs.StateSucceeded || r.Repository != repo || r.SHA != sha || r.Ref != branch || r.PRNumber != number || r.TriggerKind != "pull_request" {
		t.Fatalf("Got(run) = %s (%q) %s@%s %s #%d by %s; want succeeded %s@%s %s #%d by pull_request", r.State, r.StateReason, r.Repository,
			r.SHA, r.Ref, r.PRNumber, r.TriggerKind, repo, sha, branch, number)
	}
	if len(steps) != 2 || !strings.Contains(steps[0].Output, "at "+sha) || !strings.Contains(steps[0].Output, "Ran 2 tests") ||
		!strings.Contains(steps[0].Output, "OK") || !strings.Contains(steps[1].Output, "placeholder in env\nclean") {
		t.Errorf("Got(steps) = %+v; want the tests of commit %s run (2 tests, OK), the placeholder in the env and a clean .git/config", steps, sha)
	}
	for _, st := range steps {
		t.Logf("step %q exit %v in %d ms:\n%s", st.Name, *st.ExitCode, st.DurationMS, st.Output)
		if strings.Contains(st.Output, e2eToken) {
			t.Errorf("Got(step %q output) holds the real token", st.Name)
		}
	}

	// The clone authenticated with the real token, swapped in by the
	// gateway: the git server never saw the placeholder.
	auths := gitSrv.auths()
	real := 0
	for _, s := range auths {
		switch s {
		case "real":
			real++
		case "placeholder", "other":
			t.Errorf("Got(git server auth) = %q; want only the real token (the gateway swaps the placeholder)", s)
		}
	}
	if real == 0 {
		t.Errorf("Got(git server auths) = %q; want requests with the real token", auths)
	}
	evs, err := e.events.Events(bg, e.tenant.ID, egress.Filter{SandboxID: r.SandboxID})
	if err != nil {
		t.Fatal(err)
	}
	intercepted := false
	for _, ev := range evs {
		intercepted = intercepted || (ev.Host == gitHost && ev.Intercepted && ev.Decision == egress.DecisionAllow)
	}
	if !intercepted {
		t.Errorf("Got(egress events of the sandbox) = %+v; want an allowed, intercepted connection to %s", evs, gitHost)
	}

	// Notifications are sent after the run is recorded: wait for them.
	var gh, slk, jr, ghErr, slkErr, jrErr []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		gh, ghErr = github.requests()
		slk, slkErr = slack.requests()
		jr, jrErr = jira.requests()
		if len(gh) >= 3 && len(slk) >= 1 && len(jr) >= 1 {
			break
		}
	}
	t.Logf("git server auths %q; GitHub %q; Slack %q; Jira %q", gitSrv.auths(), gh, slk, jr)
	statusPath := "POST /repos/" + repo + "/statuses/" + sha
	if len(gh) != 3 || gh[0] != statusPath || gh[1] != statusPath || gh[2] != fmt.Sprintf("POST /repos/%s/issues/%d/comments", repo, number) || len(ghErr) > 0 {
		t.Errorf("Got(GitHub requests) = %q, refused %q; want two statuses (pending, success) and a comment", gh, ghErr)
	}
	stMu.Lock()
	if got := strings.Join(statuses, ","); got != "pending,success" {
		t.Errorf("Got(commit statuses) = %q; want pending,success", got)
	}
	stMu.Unlock()
	if len(slk) != 1 || len(slkErr) > 0 {
		t.Errorf("Got(Slack requests) = %q, refused %q; want one message", slk, slkErr)
	}
	if len(jr) != 1 || len(jrErr) > 0 {
		t.Errorf("Got(Jira requests) = %q, refused %q; want one comment on ENG-42", jr, jrErr)
	}

	// The sandbox is gone: destroyed in the database and unknown to the
	// VM's agent.
	if r.SandboxID == "" {
		t.Fatalf("run %s names no sandbox", r.ID)
	}
	st, err := e.svc.Get(bg, e.tenant.ID, r.SandboxID)
	if err != nil || st.Sandbox.State != sandbox.StateDestroyed {
		t.Errorf("Got(sandbox %s) = %s, %v; want destroyed", r.SandboxID, st.Sandbox.State, err)
	}
	agent, err := e.vms.Agent(bg, e.tenant.ID, st.Sandbox.VMID)
	if err != nil {
		t.Fatalf("agent of vm %s: %v", st.Sandbox.VMID, err)
	}
	l, err := agent.ListSandboxes(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Sandboxes {
		if s.ID == r.SandboxID {
			t.Errorf("Got(agent's sandboxes) holds %s (%+v); want it gone", s.ID, s)
		}
	}
	if strings.Contains(e.logs.String(), e2eToken) {
		t.Errorf("Got(control plane log) holds the real token")
	}

	t.Run("a fork's pull request runs without secrets and checkout token", func(t *testing.T) {
		forkUntrusted(t, e, gitSrv)
	})
}

// waitEnded waits for the tenant's run id to end and returns it with its
// steps.
func (e *e2eEnv) waitEnded(t *testing.T, id string) (runs.Run, []runs.Step) {
	t.Helper()
	begin := time.Now()
	for deadline := time.Now().Add(8 * time.Minute); ; time.Sleep(time.Second) {
		r, steps, err := e.engine.Store().Get(bg, e.tenant.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.State.Ended() {
			t.Logf("run %s %s after %v: %s", r.ID, r.State, time.Since(begin).Round(time.Millisecond), r.StateReason)
			return r, steps
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s after 8 min; want it ended", id, r.State)
		}
	}
}

// forkUntrusted is the attack on a real VM: a fork's pull request, with a
// valid signature, against a workflow whose steps name the GitHub token
// and whose checkout would use it. Without allow_forks nothing runs; with
// it the run's sandbox holds no secret placeholder at all and the clone
// (of a public repository) goes out with no credentials.
func forkUntrusted(t *testing.T, e *e2eEnv, gitSrv *gitServer) {
	const (
		private = "acme/app"
		public  = "acme/oss"
		fork    = "mallory/oss"
		branch  = "patch-1"
	)
	sha := gitSrv.repository(t, public, branch)
	gitSrv.publish(public)

	// pr-tests (acme/app) does not allow forks: skipped, no sandbox.
	code, a := deliver(t, e.url, "acme", "pull_request", uuid.NewString(), []byte(hookSecret),
		forkPullRequestPayload(private, "mallory/app", branch, sha, 43))
	if code != http.StatusOK || a.Status != "skipped" || len(a.Runs) != 0 || len(a.Skipped) != 1 {
		t.Fatalf("Got(fork pull request to %s) = %d %+v; want 200 skipped, one skipped run", private, code, a)
	}
	skipped, _, err := e.engine.Store().Get(bg, e.tenant.ID, a.Skipped[0])
	if err != nil || skipped.State != runs.StateSkipped || skipped.SandboxID != "" ||
		skipped.TrustReason != "fork pull request from mallory/app (allow_forks not set)" {
		t.Errorf("Got(skipped run) = %s %q sandbox %q, %v; want skipped, no sandbox, saying allow_forks is not set", skipped.State, skipped.TrustReason, skipped.SandboxID, err)
	}

	if _, err := e.wf.Save(bg, admin, e.tenant.ID, []byte(`name: fork-tests
triggers: [{event: pull_request}]
repositories: [`+public+`]
allow_forks: true
sandbox: {template: debian, memory_mib: 256}
timeout_seconds: 600
steps:
  - name: no secrets
    env: [GH_TOKEN]
    run: |
      echo "trust=$STOCKADE_TRUST"
      if env | grep stockade-placeholder; then echo "a placeholder in the env"; exit 1; fi
      [ -z "${GH_TOKEN+set}" ] && echo "GH_TOKEN unset"
      cd "$STOCKADE_CHECKOUT_DIR" && git log -1 --format='at %H' && python3 -m unittest 2>&1
notify:
  github: {token_secret: GH_TOKEN, status: false, comment: false}
`), nil); err != nil {
		t.Fatalf("save the fork workflow: %v", err)
	}
	seen := len(gitSrv.auths())
	code, a = deliver(t, e.url, "acme", "pull_request", uuid.NewString(), []byte(hookSecret), forkPullRequestPayload(public, fork, branch, sha, 7))
	if code != http.StatusAccepted || len(a.Runs) != 1 {
		t.Fatalf("Got(fork pull request to %s) = %d %+v; want 202 with one run", public, code, a)
	}
	r, steps := e.waitEnded(t, a.Runs[0])
	if r.State != runs.StateSucceeded || r.Trust != workflow.TrustUntrusted || r.TrustReason != "fork pull request from "+fork+" (allow_forks)" {
		t.Errorf("Got(fork run) = %s (%q), trust %q (%q); want succeeded, untrusted from %s", r.State, r.StateReason, r.Trust, r.TrustReason, fork)
	}
	if len(steps) != 1 {
		t.Fatalf("Got(steps of the fork run) = %d; want 1", len(steps))
	}
	out := steps[0].Output
	t.Logf("fork run step output:\n%s", out)
	if !strings.Contains(out, "trust=untrusted\nGH_TOKEN unset\nat "+sha) || !strings.Contains(out, "OK") || strings.Contains(out, "placeholder") {
		t.Errorf("Got(step output) = %q; want STOCKADE_TRUST=untrusted, no GH_TOKEN, no placeholder, commit %s tested", out, sha)
	}
	// The sandbox was made with no secret at all, whatever the policy grants.
	st, err := e.svc.Get(bg, e.tenant.ID, r.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range st.Sandbox.EnvKeys() {
		if k == "GH_TOKEN" || k == "GH_HOOK" || k == "SLACK_URL" || k == "JIRA_TOKEN" {
			t.Errorf("Got(env of the fork run's sandbox) holds %s; want no secret", k)
		}
	}
	// The clone went out with no credentials: not the real token, not a
	// placeholder.
	auths := gitSrv.auths()[seen:]
	if len(auths) == 0 {
		t.Errorf("Got(git server requests of the fork run) = none; want the clone")
	}
	for _, s := range auths {
		if s != "none" {
			t.Errorf("Got(git server auths of the fork run) = %q; want every request without credentials", auths)
			break
		}
	}
}
