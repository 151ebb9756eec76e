package sandboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NPMRegistry is a real npm registry server for one test: verdaccio
// (pinned with its whole tree by scripts/npm-registry/package-lock.json,
// installed once by scripts/npm-registry.sh into a cache outside the
// checkout) on a 127.0.0.1 port, with its own storage, no uplink (it
// serves only what the test publishes) and one user whose token publishes.
type NPMRegistry struct {
	// Addr is 127.0.0.1:port; URL is http://Addr/.
	Addr, URL string
	// Token is the publishing user's token (npm's _authToken).
	Token string
	dir   string
}

// StartNPMRegistry starts the registry; the test's cleanup stops it.
// Without node or npm, or when verdaccio cannot be installed, the test
// fails under CI=true and is skipped elsewhere.
func StartNPMRegistry(tb testing.TB) *NPMRegistry {
	tb.Helper()
	missing := func(format string, args ...any) {
		tb.Helper()
		if os.Getenv("CI") == "true" {
			tb.Fatalf("npm registry: "+format+": CI must run the npm tests (make deps installs them)", args...)
		}
		tb.Skipf("npm registry: "+format+": skipping", args...)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing("%s is missing (%v)", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(repoRoot(), "scripts", "npm-registry.sh")).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		missing("scripts/npm-registry.sh: %v: %s", err, stderr)
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "node_modules", ".bin", "verdaccio")

	r := &NPMRegistry{dir: tb.TempDir()}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r.Addr = l.Addr().String()
	l.Close()
	r.URL = "http://" + r.Addr + "/"
	// max_users 1: the test's user is the only one; nobody else publishes.
	config := fmt.Sprintf(`storage: %s
auth:
  htpasswd:
    file: %s
    max_users: 1
uplinks: {}
packages:
  '**':
    access: $all
    publish: $authenticated
    unpublish: $authenticated
web: {enable: false}
log: {type: stdout, format: pretty, level: warn}
`, filepath.Join(r.dir, "storage"), filepath.Join(r.dir, "htpasswd"))
	confPath := filepath.Join(r.dir, "config.yaml")
	if err := os.WriteFile(confPath, []byte(config), 0o600); err != nil {
		tb.Fatal(err)
	}
	logPath := filepath.Join(r.dir, "verdaccio.log")
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close() // the process has its own descriptor
	logged := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	cmd := exec.Command(bin, "--config", confPath, "--listen", r.Addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start verdaccio: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tb.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	// Ready when it answers its ping (a cold start of node takes seconds
	// on a loaded machine).
	for ready := false; !ready; {
		select {
		case err := <-done:
			tb.Fatalf("verdaccio exited: %v\n%s", err, logged())
		case <-ctx.Done():
			tb.Fatalf("verdaccio did not answer on %s: %v\n%s", r.Addr, ctx.Err(), logged())
		case <-time.After(200 * time.Millisecond):
		}
		if resp, err := http.Get(r.URL + "-/ping"); err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
	}
	// The user, made as `npm adduser` makes it; verdaccio answers its token.
	body, _ := json.Marshal(map[string]string{"name": "stockade-test", "password": "publish-" + filepath.Base(r.dir)})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, r.URL+"-/user/org.couchdb.user:stockade-test", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("npm registry: add user: %v", err)
	}
	defer resp.Body.Close()
	var u struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil || resp.StatusCode != http.StatusCreated || u.Token == "" {
		tb.Fatalf("npm registry: add user: %d, %v; want 201 with a token", resp.StatusCode, err)
	}
	r.Token = u.Token
	return r
}

// Publish runs `npm publish` in dir (a package folder) against the
// registry, with the user's token in a config file of the test's own.
func (r *NPMRegistry) Publish(tb testing.TB, dir string) {
	tb.Helper()
	rc := filepath.Join(tb.TempDir(), "npmrc")
	conf := fmt.Sprintf("registry=%s\n//%s/:_authToken=%s\n", r.URL, r.Addr, r.Token)
	if err := os.WriteFile(rc, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "publish", "--userconfig", rc, "--registry", r.URL, "--no-audit", "--no-fund")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(r.dir, "npm-cache"))
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("npm publish %s: %v\n%s", dir, err, out)
	}
}
