package e2b_test

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// sdkEnv is the whole app on real VMs with two tenants' developer tokens
// and a directory where Node finds the pinned SDK.
type sdkEnv struct {
	env        *webtest.Env
	tnA        tenants.Tenant
	tokA, tokB string
	dir        string
}

// startSDK starts it; unchecked serves the app without the OpenAPI check
// of every answer (for benchmarks: it would slow the native API only).
func startSDK(tb testing.TB, unchecked bool) sdkEnv {
	mods := webtest.NodeModules(tb, e2bSDK, "e2b")
	dataDir := sandboxtest.NeedVMs(tb)
	db := dbtest.SQLite(tb)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vms, sbx := sandboxtest.Start(tb, db, vmpool.Config{DataDir: dataDir, Logger: log},
		sandbox.Config{SyncInterval: 500 * time.Millisecond, SampleInterval: time.Second, DefaultTemplate: "debian"})
	env := webtest.New(tb, webtest.Options{DB: db, VMs: vms, Sandboxes: sbx, NoOpenAPICheck: unchecked})
	tnA, tnB := env.Tenant(tb, "e2b-a"), env.Tenant(tb, "e2b-b")
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	if _, err := vms.SetPool(context.Background(), sys, tnA.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		tb.Fatal(err)
	}
	e := sdkEnv{env: env, tnA: tnA, tokA: env.Token(tb, tnA, tenants.RoleDeveloper), tokB: env.Token(tb, tnB, tenants.RoleDeveloper), dir: tb.TempDir()}
	if err := os.Symlink(mods, filepath.Join(e.dir, "node_modules")); err != nil {
		tb.Fatal(err)
	}
	return e
}

// node runs script under Node with in as JSON on stdin (no secret in argv
// or the environment) and returns what it printed.
func (e sdkEnv) node(tb testing.TB, name string, script []byte, in any) []byte {
	tb.Helper()
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, script, 0o644); err != nil {
		tb.Fatal(err)
	}
	stdin, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", path)
	cmd.Dir, cmd.Stdin = e.dir, bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("node %s: %v\n%s", name, err, stderr.String())
	}
	return out
}

// e2bSDK is the E2B JS SDK the conformance test drives Stockade with, pinned.
const e2bSDK = "e2b@2.51.0"

//go:embed conformance.mjs
var conformanceScript []byte

// TestE2BSDK is the E2B acceptance test (E2B.md B.5): the unmodified e2b
// npm SDK under Node, against the whole app on real VMs (TCG here),
// creates a sandbox with envs and metadata, runs commands with callbacks
// and exit codes, background commands, stdin, files (a 5 MiB octet-stream
// upload too), a watch, a PTY with resize, setTimeout, list by metadata,
// connect, pause (twice: true, then false) and connect-resume (201) with a
// background process intact, list by state paused, kill; a wrong key is the
// SDK's AuthenticationError, another tenant's id is not found, and an
// access token of sandbox A cannot touch sandbox B.
func TestE2BSDK(t *testing.T) {
	e := startSDK(t, false)
	// A's key is its E2B-shaped alias (e2b_ + hex), B's the token itself.
	out := e.node(t, "conformance.mjs", conformanceScript, map[string]string{"apiUrl": e.env.URL + "/e2b", "sandboxUrl": e.env.URL,
		"key": "e2b_" + hex.EncodeToString([]byte(e.tokA)), "otherKey": e.tokB})
	env, tnA := e.env, e.tnA
	t.Logf("e2b SDK results: %s", out)
	var got map[string]map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %s: %v", out, err)
	}
	id, _ := got["create"]["id"].(string)
	if id == "" {
		t.Fatalf("Got(Sandbox.create) = %v; want a sandbox id", got["create"])
	}
	str := func(step, k string) string { s, _ := got[step][k].(string); return s }
	is := func(step, k string, want any) {
		t.Helper()
		if g := got[step][k]; g != want {
			t.Errorf("Got(%s.%s) = %v (step: %v); want %v", step, k, g, got[step], want)
		}
	}
	is("run", "out", "1\n")
	is("run", "err", "err\n")
	is("run", "stdout", "1\n")
	is("run", "stderr", "err\n")
	is("exit3", "isExitError", true)
	is("exit3", "exitCode", 3.0)
	is("background", "listed", true)
	is("background", "killed", true)
	is("background", "waitRejected", true)
	is("background", "killedAgain", false)
	is("stdin", "stdout", "hello stdin\n")
	is("files", "read", "hi")
	is("files", "mkdir1", true)
	is("files", "mkdir2", false)
	is("files", "movedPath", "/home/user/b.txt")
	is("files", "existsB", true)
	is("files", "existsA", false)
	is("files", "existsAfterRemove", false)
	is("files", "readMissing", "FileNotFoundError")
	is("files", "bigSize", float64(5<<20))
	is("files", "bigSame", true)
	var names []string
	if l, ok := got["files"]["list"].([]any); ok {
		for _, e := range l {
			m := e.(map[string]any)
			names = append(names, m["name"].(string)+":"+m["type"].(string))
		}
	}
	if !slices.Contains(names, "d:dir") || !slices.Contains(names, "a.txt:file") {
		t.Errorf("Got(files.list /home/user) = %v; want a.txt:file and d:dir", names)
	}
	if evs, _ := json.Marshal(got["watch"]["events"]); !strings.Contains(string(evs), `"name":"x"`) {
		t.Errorf("Got(watchDir events) = %v; want an event on x", got["watch"])
	} else if strings.Contains(string(evs), ".stockade-upload-") {
		t.Errorf("Got(watchDir events) = %s; want no event on a write's temporary file", evs)
	}
	is("pty", "first", true)
	is("pty", "second", true)
	is("pty", "killed", true)
	is("setTimeout", "moved", true)
	is("list", "found", true)
	is("list", "state", "running")
	is("list", "otherCount", 0.0)
	is("connect", "id", id)
	is("connect", "stdout", "connected\n")
	is("pause", "first", true)
	is("pause", "second", false)
	is("pause", "listedPaused", true)
	is("pause", "listedRunning", false)
	is("pause", "infoState", "paused")
	if e := str("pause", "runWhilePaused"); !strings.Contains(e, "paused") {
		t.Errorf("Got(commands.run on a paused sandbox) = %q; want an error saying it is paused", e)
	}
	is("pause", "connectStatus", 201.0)
	is("pause", "connectAgainStatus", 200.0)
	is("pause", "repaused", true)
	is("pause", "infoStateAfter", "running")
	is("pause", "exitCode", 0.0)
	is("pause", "bgListed", true)
	is("pause", "bgKilled", true)
	is("negative", "wrongKey", "AuthenticationError")
	is("negative", "otherTenantKill", false)
	is("negative", "otherTenantInfo", "NotFoundError")
	if raw, _ := got["negative"]["otherTenantRaw"].(map[string]any); raw["status"] != 404.0 || raw["body"].(map[string]any)["code"] != 404.0 {
		t.Errorf("Got(another tenant's GET /sandboxes/id) = %v; want 404 with body code 404", raw)
	}
	if c, _ := got["negative"]["crossToken"].(map[string]any); c["status"] != 401.0 || !strings.Contains(c["body"].(string), "unauthenticated") {
		t.Errorf("Got(A's access token on sandbox B) = %v; want 401 unauthenticated", c)
	}
	if c, _ := got["negative"]["ownToken"].(map[string]any); c["status"] != 200.0 {
		t.Errorf("Got(A's access token on A) = %v; want 200", c)
	}
	is("negative", "crossFiles", 401.0)
	if e := str("negative", "rootUser"); !strings.Contains(e, "root") {
		t.Errorf("Got(commands.run as root) = %q; want a permission error naming root", e)
	}
	is("negative", "killB", true)
	is("kill", "killed", true)
	is("kill", "again", false)
	is("kill", "running", false)
	if e := str("kill", "run"); e == "no error" || e == "" {
		t.Errorf("Got(commands.run on a killed sandbox) = %q; want an error", e)
	}
	if e := str("wrongPort", "error"); e == "no error" || e == "" {
		t.Errorf("Got(list against a wrong port) = %q; want an error", e)
	}

	// Audited and metered like the native API: the sandbox's create and
	// destroy, its processes and file writes are in tenant A's log by A's
	// token; nothing of it in B's.
	for _, typ := range []string{audit.TypeSandboxCreated, audit.TypeProcessStarted, audit.TypeSandboxFileWritten,
		audit.TypeSandboxPaused, audit.TypeSandboxResumed, audit.TypeSandboxDestroyed} {
		n := 0
		for _, e := range env.Events(t, typ) {
			if e.TargetID != id && e.Details["sandbox_id"] != id {
				continue
			}
			n++
			if e.TenantID != tnA.ID || e.ActorKind != "token" {
				t.Errorf("Got(%s of A's sandbox) in tenant %s by %s %s; want tenant A by its token", typ, e.TenantID, e.ActorKind, e.ActorName)
			}
		}
		if n == 0 {
			t.Errorf("Got(no %s event of the sandbox); want one", typ)
		}
	}
}
