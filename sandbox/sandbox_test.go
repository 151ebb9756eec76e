package sandbox_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	wire "github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// problem is the part of a problem document tests look at.
type problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Field string `json:"field"`
		Rule  string `json:"rule"`
	} `json:"errors"`
}

func (p problem) field() string {
	if len(p.Errors) == 0 {
		return ""
	}
	return p.Errors[0].Field
}

func decodeProblem(tb testing.TB, hdr http.Header, body string) problem {
	tb.Helper()
	if ct := hdr.Get("Content-Type"); ct != "application/problem+json" {
		tb.Errorf("Got(Content-Type) = %q; want application/problem+json: %.200s", ct, body)
	}
	var p problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		tb.Fatalf("not a problem document: %v: %s", err, body)
	}
	return p
}

// call sends a JSON body (or raw bytes) and returns status, body, headers.
func call(tb testing.TB, c *webtest.Client, method, path string, in any) (int, string, http.Header) {
	tb.Helper()
	var body io.Reader
	ct := ""
	switch v := in.(type) {
	case nil:
	case string:
		body, ct = strings.NewReader(v), "application/json"
	case []byte:
		body, ct = bytes.NewReader(v), "application/octet-stream"
	default:
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	var hdr []string
	if c.Bearer == "" && method != http.MethodGet {
		hdr = []string{"X-CSRF-Token", c.CSRF(tb)}
	}
	return c.Request(tb, method, path, ct, body, hdr...)
}

func create(tb testing.TB, c *webtest.Client, in any) wire.Sandbox {
	tb.Helper()
	status, body, _ := call(tb, c, http.MethodPost, "/api/v1/sandboxes", in)
	var out wire.Sandbox
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &out) != nil || out.State != "running" {
		tb.Fatalf("POST /api/v1/sandboxes = %d %s; want 201 with a running sandbox", status, body)
	}
	return out
}

func execIn(tb testing.TB, c *webtest.Client, id string, in any) wire.ExecResult {
	tb.Helper()
	status, body, _ := call(tb, c, http.MethodPost, "/api/v1/sandboxes/"+id+"/exec", in)
	var out wire.ExecResult
	if status != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
		tb.Fatalf("exec %v = %d %s; want 200", in, status, body)
	}
	return out
}

func destroy(tb testing.TB, c *webtest.Client, id string) wire.Sandbox {
	tb.Helper()
	status, body, _ := call(tb, c, http.MethodDelete, "/api/v1/sandboxes/"+id, nil)
	var out wire.Sandbox
	if status != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil || out.State != "destroyed" {
		tb.Fatalf("DELETE %s = %d %s; want 200 destroyed", id, status, body)
	}
	return out
}

func (e *testEnv) sandbox(tb testing.TB, id string) sandbox.Sandbox {
	tb.Helper()
	sb, err := e.service().Store().Sandbox(ctx, e.a.ID, id)
	if err != nil {
		tb.Fatalf("sandbox %s: %v", id, err)
	}
	return sb
}

// waitEnded polls until the sandbox has ended, failing after timeout.
func (e *testEnv) waitEnded(tb testing.TB, id string, timeout time.Duration) sandbox.Sandbox {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sb := e.sandbox(tb, id)
		if sb.State.Ended() {
			return sb
		}
		if time.Now().After(deadline) {
			tb.Fatalf("sandbox %s still %s (%s) after %v; want it ended", id, sb.State, sb.StateReason, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *testEnv) events(tb testing.TB, tenantID, typ, target string) []audit.Event {
	tb.Helper()
	evs, err := audit.NewLog(e.db, nil).List(ctx, tenantID, audit.Filter{Type: typ, Limit: audit.MaxLimit})
	if err != nil {
		tb.Fatal(err)
	}
	var out []audit.Event
	for _, ev := range evs {
		if target == "" || ev.TargetID == target {
			out = append(out, ev)
		}
	}
	return out
}

// guestClean checks that the guest holds no sandbox but the given ones,
// and, with none, that nothing of any sandbox is left in it.
func (e *testEnv) guestClean(tb testing.TB, keep ...string) {
	tb.Helper()
	got := e.guestSandboxes(tb)
	for id := range got {
		found := false
		for _, k := range keep {
			found = found || k == id
		}
		if !found {
			tb.Errorf("Got(sandbox %s in the guest) = %s; want it gone", id, got[id].State)
		}
	}
	if len(keep) > 0 {
		return
	}
	st, err := e.agent(tb).Stats(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if st.Sandboxes != 0 || st.SandboxBundles != 0 || st.SandboxCgroups != 0 {
		tb.Errorf("Got(guest after every sandbox ended) = %d sandboxes, %d bundles, %d cgroups; want none left",
			st.Sandboxes, st.SandboxBundles, st.SandboxCgroups)
	}
}

// TestSandboxes runs the acceptance checks on real VMs in order, sharing
// the one warm VM of tenant A.
func TestSandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs")
	}
	e := need(t)
	t.Run("BadInput", e.testBadInput)
	t.Run("Lifecycle", e.testLifecycle)
	t.Run("StreamingExec", e.testStreaming)
	t.Run("TimeoutsAndLimits", e.testTimeouts)
	t.Run("TenantIsolation", e.testIsolation)
	t.Run("Permissions", e.testPermissions)
	t.Run("Pages", e.testPages)
	t.Run("CLI", e.testCLI)
	t.Run("IdempotentCreate", e.testIdempotentCreate)
	t.Run("BurstBeyondCapacity", e.testBurstBeyondCapacity)
	t.Run("PlacementBootsWhenFull", e.testPlacement)
	t.Run("RestartAdopts", e.testRestart)
	t.Run("Metering", e.testMetering)
	t.Run("MeteringStopped", e.testMeteringStopped)
	t.Run("MeteringAcrossRestarts", e.testMeteringRestart)
	t.Run("KillMidCreate", e.testKill)
}

func (e *testEnv) testBadInput(t *testing.T) {
	api := e.api(e.tokA)
	run := create(t, api, map[string]any{"memory_mib": 64})
	defer destroy(t, api, run.ID)
	created := func() []wire.Sandbox {
		var l struct{ Sandboxes []wire.Sandbox }
		if s, body := api.JSON(t, http.MethodGet, "/api/v1/sandboxes", nil, &l); s != http.StatusOK {
			t.Fatalf("list = %d %s", s, body)
		}
		return l.Sandboxes
	}
	listBefore := len(created())
	guestBefore := len(e.guestSandboxes(t))

	tests := []struct {
		name   string
		method string
		path   string
		in     any
		status int
		field  string
	}{
		{"unknown template", "POST", "/api/v1/sandboxes", map[string]any{"template": "no-such-template"}, 422, "template"},
		{"vcpus above the vm size", "POST", "/api/v1/sandboxes", map[string]any{"vcpus": 2}, 422, "vcpus"},
		{"memory above the vm size", "POST", "/api/v1/sandboxes", map[string]any{"memory_mib": 4096}, 422, "memory_mib"},
		{"timeout over a week", "POST", "/api/v1/sandboxes", map[string]any{"timeout_seconds": 9999999}, 422, "timeout_seconds"},
		{"unknown field", "POST", "/api/v1/sandboxes", `{"templ":"busybox"}`, 400, "templ"},
		{"malformed json", "POST", "/api/v1/sandboxes", `{"template":`, 400, "body"},
		{"env not an object", "POST", "/api/v1/sandboxes", `{"env":["A=B"]}`, 400, "env"},
		{"bad env name", "POST", "/api/v1/sandboxes", map[string]any{"env": map[string]string{"A-B": "x"}}, 422, "env"},
		{"cmd not a list", "POST", "/api/v1/sandboxes/" + run.ID + "/exec", `{"cmd":"ls -l"}`, 400, "cmd"},
		{"cmd empty", "POST", "/api/v1/sandboxes/" + run.ID + "/exec", map[string]any{"cmd": []string{}}, 422, "cmd"},
		{"cmd with NUL", "POST", "/api/v1/sandboxes/" + run.ID + "/exec", map[string]any{"cmd": []string{"echo", "a\x00b"}}, 422, "cmd"},
		{"no such program", "POST", "/api/v1/sandboxes/" + run.ID + "/exec", map[string]any{"cmd": []string{"/no/such/program"}}, 422, "cmd"},
		{"exec in a missing sandbox", "POST", "/api/v1/sandboxes/01900000-0000-7000-8000-000000000000/exec", map[string]any{"cmd": []string{"true"}}, 404, ""},
		{"read with traversal", "GET", "/api/v1/sandboxes/" + run.ID + "/files?path=" + url.QueryEscape("../../etc/passwd"), nil, 422, "path"},
		{"write with traversal", "PUT", "/api/v1/sandboxes/" + run.ID + "/files?path=" + url.QueryEscape("/workspace/../../run/x"), []byte("x"), 422, "path"},
		{"read without a path", "GET", "/api/v1/sandboxes/" + run.ID + "/files", nil, 422, "path"},
		{"read a missing file", "GET", "/api/v1/sandboxes/" + run.ID + "/files?path=/workspace/none", nil, 404, ""},
		{"upload over the limit", "PUT", "/api/v1/sandboxes/" + run.ID + "/files?path=big.bin", make([]byte, testFileLimit+1), 413, ""},
		{"bad mode", "PUT", "/api/v1/sandboxes/" + run.ID + "/files?path=a.txt&mode=999", []byte("x"), 422, "mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := counts(t, e.db)
			status, body, hdr := call(t, api, tt.method, tt.path, tt.in)
			if status != tt.status {
				t.Fatalf("Got(%s %s) = %d %s; want %d", tt.method, tt.path, status, body, tt.status)
			}
			p := decodeProblem(t, hdr, body)
			if p.Status != tt.status || (tt.field != "" && p.field() != tt.field) {
				t.Errorf("Got(problem) = %+v; want status %d naming %q", p, tt.status, tt.field)
			}
			if strings.HasSuffix(tt.path, "/exec") && tt.name == "no such program" {
				return // a command that was tried is recorded, by design
			}
			sameCounts(t, e.db, before, tt.name)
		})
	}

	t.Run("upload over the limit, chunked", func(t *testing.T) {
		// No Content-Length: the server only finds out while reading.
		pr, pw := io.Pipe()
		go func() { pw.Write(make([]byte, testFileLimit+4096)); pw.Close() }()
		status, body, _ := api.Request(t, http.MethodPut, "/api/v1/sandboxes/"+run.ID+"/files?path=big.bin", "application/octet-stream", pr)
		if status != http.StatusRequestEntityTooLarge {
			t.Errorf("Got(chunked upload over the limit) = %d %s; want 413", status, body)
		}
		if s, _, _ := call(t, api, http.MethodGet, "/api/v1/sandboxes/"+run.ID+"/files?path=big.bin", nil); s != http.StatusNotFound {
			t.Errorf("Got(GET big.bin after the refused upload) = %d; want 404: nothing written", s)
		}
	})

	t.Run("over the quota", func(t *testing.T) {
		ts := tenants.NewStore(e.db, nil)
		old, err := ts.Quota(ctx, e.a.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer ts.SetQuota(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, e.a.ID, old)
		for _, tt := range []struct {
			quota tenants.Quota
			in    map[string]any
			name  string
		}{
			{tenants.Quota{MaxVMs: old.MaxVMs, MaxVCPUs: old.MaxVCPUs, MaxMemoryMiB: old.MaxMemoryMiB, MaxSandboxes: 1, MaxCPUHoursMonthly: 100}, map[string]any{"memory_mib": 64}, tenants.QuotaMaxSandboxes},
			{tenants.Quota{MaxVMs: old.MaxVMs, MaxVCPUs: old.MaxVCPUs, MaxMemoryMiB: 100, MaxSandboxes: 10, MaxCPUHoursMonthly: 100}, map[string]any{"memory_mib": 64}, tenants.QuotaMaxMemoryMiB},
			{tenants.Quota{MaxVMs: old.MaxVMs, MaxVCPUs: 1, MaxMemoryMiB: old.MaxMemoryMiB, MaxSandboxes: 10, MaxCPUHoursMonthly: 100}, map[string]any{"memory_mib": 64}, tenants.QuotaMaxVCPUs},
			// No CPU time left this month: nothing new starts.
			{tenants.Quota{MaxVMs: old.MaxVMs, MaxVCPUs: old.MaxVCPUs, MaxMemoryMiB: old.MaxMemoryMiB, MaxSandboxes: 10, MaxCPUHoursMonthly: 0}, map[string]any{"memory_mib": 64}, tenants.QuotaMaxCPUHoursMonthly},
		} {
			if _, err := ts.SetQuota(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, e.a.ID, tt.quota); err != nil {
				t.Fatal(err)
			}
			before := counts(t, e.db)
			status, body, hdr := call(t, api, http.MethodPost, "/api/v1/sandboxes", tt.in)
			p := decodeProblem(t, hdr, body)
			if status != http.StatusTooManyRequests || p.field() != tt.name {
				t.Errorf("Got(create over %s) = %d %+v; want 429 naming %s", tt.name, status, p, tt.name)
			}
			sameCounts(t, e.db, before, "create over "+tt.name)
		}
	})

	if got := len(created()); got != listBefore {
		t.Errorf("Got(sandboxes after bad input) = %d; want %d (nothing made)", got, listBefore)
	}
	if got := len(e.guestSandboxes(t)); got != guestBefore {
		t.Errorf("Got(sandboxes in the guest after bad input) = %d; want %d", got, guestBefore)
	}
}

func (e *testEnv) testLifecycle(t *testing.T) {
	api := e.api(e.tokADev)
	begin := time.Now()
	sb := create(t, api, map[string]any{"template": "busybox", "memory_mib": 128, "timeout_seconds": 600,
		"env": map[string]string{"GREETING": "hello from env"}, "metadata": map[string]string{"task": "lifecycle"}})
	t.Logf("MEASURED create through the API: %v (guest %d ms)", time.Since(begin).Round(time.Millisecond), sb.GuestReadyMS)
	if sb.VMID != e.warmVM || sb.Template != "busybox" || sb.MemoryMiB != 128 || sb.VCPUs != 1 || sb.Metadata["task"] != "lifecycle" {
		t.Errorf("Got(created) = %+v; want busybox, 1 vCPU, 128 MiB on the warm vm %s", sb, e.warmVM)
	}
	if len(sb.EnvKeys) != 1 || sb.EnvKeys[0] != "GREETING" {
		t.Errorf("Got(env_keys) = %v; want [GREETING] (names only)", sb.EnvKeys)
	}
	var raw string
	e.db.Table("sandboxes").Where("id = ?", sb.ID).Select("env_keys").Scan(&raw)
	if strings.Contains(raw, "hello from env") {
		t.Errorf("Got(stored env) = %s; want the names only, never the values", raw)
	}
	vm, err := e.pools().VM(ctx, e.a.ID, e.warmVM)
	if err != nil || vm.AcquiredAt == nil {
		t.Errorf("Got(warm vm) = %+v, %v; want it handed out to sandboxes", vm, err)
	}

	t.Run("exec", func(t *testing.T) {
		r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "echo out; echo err >&2; echo $GREETING; id -u; pwd"}})
		if r.ExitCode != 0 || r.Reason != "exited" || r.Stdout != "out\nhello from env\n1000\n/workspace\n" || r.Stderr != "err\n" {
			t.Errorf("Got(exec) = %+v; want exit 0, out/env/uid 1000//workspace on stdout, err on stderr", r)
		}
		if r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "exit 3"}}); r.ExitCode != 3 {
			t.Errorf("Got(exit 3) = %+v; want exit code 3", r)
		}
		if r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"cat"}, "stdin": "piped\ninput"}); r.Stdout != "piped\ninput" {
			t.Errorf("Got(cat with stdin) = %q; want the stdin back", r.Stdout)
		}
		if r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"pwd"}, "cwd": "/tmp", "env": map[string]string{"X": "1"}}); r.Stdout != "/tmp\n" {
			t.Errorf("Got(pwd in /tmp) = %q; want /tmp", r.Stdout)
		}
		evs := e.events(t, e.a.ID, audit.TypeSandboxExec, sb.ID)
		if len(evs) < 4 {
			t.Fatalf("Got(sandbox.exec events) = %d; want one per command", len(evs))
		}
		cmd, _ := json.Marshal(evs[len(evs)-1].Details["cmd"])
		if !strings.Contains(string(cmd), `"sh","-c","echo out`) {
			t.Errorf("Got(audited command line) = %s; want the argv of the first command", cmd)
		}
	})

	t.Run("files", func(t *testing.T) {
		data := make([]byte, 300<<10)
		rand.Read(data)
		status, body, _ := call(t, api, http.MethodPut, "/api/v1/sandboxes/"+sb.ID+"/files?path=dir/sub/blob.bin&mode=0600", data)
		var fi wire.File
		if status != http.StatusOK || json.Unmarshal([]byte(body), &fi) != nil || fi.Size != int64(len(data)) || fi.Mode != "0600" {
			t.Fatalf("PUT file = %d %s; want 200 with %d bytes, mode 0600", status, body, len(data))
		}
		status, got, hdr := call(t, api, http.MethodGet, "/api/v1/sandboxes/"+sb.ID+"/files?path=/workspace/dir/sub/blob.bin", nil)
		if status != http.StatusOK || got != string(data) || hdr.Get("Content-Length") != fmt.Sprint(len(data)) {
			t.Errorf("Got(GET file) = %d, %d bytes (%s); want the %d bytes written", status, len(got), hdr.Get("Content-Length"), len(data))
		}
		if r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "stat -c '%s %a %u' dir/sub/blob.bin"}}); r.Stdout != fmt.Sprintf("%d 600 1000\n", len(data)) {
			t.Errorf("Got(the file seen inside) = %q; want its size, mode 600, owned by the sandbox user", r.Stdout)
		}
		// An empty file, and a file made inside read out.
		if s, body, _ := call(t, api, http.MethodPut, "/api/v1/sandboxes/"+sb.ID+"/files?path=empty", []byte{}); s != http.StatusOK {
			t.Errorf("PUT empty file = %d %s; want 200", s, body)
		}
		if s, got, _ := call(t, api, http.MethodGet, "/api/v1/sandboxes/"+sb.ID+"/files?path=empty", nil); s != http.StatusOK || got != "" {
			t.Errorf("GET empty file = %d %q; want 200 and nothing", s, got)
		}
		execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "echo made inside > inside.txt"}})
		if s, got, _ := call(t, api, http.MethodGet, "/api/v1/sandboxes/"+sb.ID+"/files?path=inside.txt", nil); s != http.StatusOK || got != "made inside\n" {
			t.Errorf("GET inside.txt = %d %q; want what the command wrote", s, got)
		}
		if evs := e.events(t, e.a.ID, audit.TypeSandboxFileWritten, sb.ID); len(evs) < 2 {
			t.Errorf("Got(sandbox.file_written events) = %d; want one per upload", len(evs))
		}
	})

	t.Run("get", func(t *testing.T) {
		var got wire.Sandbox
		if s, body := api.JSON(t, http.MethodGet, "/api/v1/sandboxes/"+sb.ID, nil, &got); s != http.StatusOK {
			t.Fatalf("GET = %d %s", s, body)
		}
		if got.Stats == nil || got.Stats.MemoryMaxBytes != 128<<20 || got.Execs < 5 {
			t.Errorf("Got(sandbox) = %+v, stats %+v; want live stats with memory.max 128 MiB and its commands counted", got, got.Stats)
		}
		if len(got.Events) != 2 || got.Events[0].State != "creating" || got.Events[1].State != "running" {
			t.Errorf("Got(timeline) = %+v; want creating then running", got.Events)
		}
	})

	t.Run("destroy", func(t *testing.T) {
		out := destroy(t, api, sb.ID)
		if out.StateReason != sandbox.ReasonRequested || out.EndedAt == nil {
			t.Errorf("Got(destroyed) = %+v; want reason requested and an end time", out)
		}
		e.guestClean(t)
		if evs := e.events(t, e.a.ID, audit.TypeSandboxDestroyed, sb.ID); len(evs) != 1 || evs[0].ActorKind != "token" || !strings.HasPrefix(evs[0].ActorName, "sbx-developer") {
			t.Errorf("Got(sandbox.destroyed) = %+v; want one, by the developer's token", evs)
		}
		if evs := e.events(t, e.a.ID, audit.TypeSandboxCreated, sb.ID); len(evs) != 1 {
			t.Errorf("Got(sandbox.created) = %d; want 1", len(evs))
		}
		if s, body, _ := call(t, api, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"true"}}); s != http.StatusConflict {
			t.Errorf("Got(exec in a destroyed sandbox) = %d %s; want 409", s, body)
		}
		if s, _, _ := call(t, api, http.MethodDelete, "/api/v1/sandboxes/"+sb.ID, nil); s != http.StatusConflict {
			t.Errorf("Got(destroy again) = %d; want 409", s)
		}
		vm, _ := e.pools().VM(ctx, e.a.ID, e.warmVM)
		if vm.AcquiredAt != nil {
			t.Errorf("Got(warm vm after its last sandbox) = acquired; want it back in the idle pool")
		}
	})
}

func (e *testEnv) testStreaming(t *testing.T) {
	api := e.api(e.tokA)
	sb := create(t, api, map[string]any{"memory_mib": 64})
	defer destroy(t, api, sb.ID)
	body, _ := json.Marshal(map[string]any{"cmd": []string{"sh", "-c", "echo one; sleep 1; printf 'two\\377'; echo bad >&2; exit 7"}})
	req, _ := http.NewRequest(http.MethodPost, api.Base+"/api/v1/sandboxes/"+sb.ID+"/exec?stream=1", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := api.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("Got(stream) = %d %s; want 200 application/x-ndjson", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var (
		events         []wire.ExecEvent
		stdout, stderr []byte
		firstOutput    time.Duration
	)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev wire.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad event %q: %v", sc.Text(), err)
		}
		events = append(events, ev)
		data := []byte(ev.Data)
		if ev.DataBase64 != "" {
			data = mustBase64(t, ev.DataBase64)
		}
		switch ev.Type {
		case "stdout":
			if firstOutput == 0 {
				firstOutput = time.Since(start)
			}
			stdout = append(stdout, data...)
		case "stderr":
			stderr = append(stderr, data...)
		}
	}
	if len(events) < 3 || events[0].Type != "started" || events[0].ExecID == "" || events[len(events)-1].Type != "exit" {
		t.Fatalf("Got(events) = %+v; want started, output, exit", events)
	}
	last := events[len(events)-1]
	if last.ExitCode == nil || *last.ExitCode != 7 || string(stdout) != "one\ntwo\xff" || string(stderr) != "bad\n" {
		t.Errorf("Got(stream) = exit %v, stdout %q, stderr %q; want 7, exact bytes", last.ExitCode, stdout, stderr)
	}
	if total := time.Since(start); firstOutput == 0 || firstOutput > total-800*time.Millisecond {
		t.Errorf("Got(first output at %v of %v); want it before the command's 1 s sleep ended (streamed, not buffered)", firstOutput, total)
	}
}

func mustBase64(tb testing.TB, s string) []byte {
	tb.Helper()
	out, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func (e *testEnv) testTimeouts(t *testing.T) {
	api := e.api(e.tokA)
	t.Run("lifetime", func(t *testing.T) {
		sb := create(t, api, map[string]any{"memory_mib": 64, "timeout_seconds": 3})
		execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "sleep 1000 >/dev/null 2>&1 &"}})
		got := e.waitEnded(t, sb.ID, 30*time.Second)
		if got.State != sandbox.StateDestroyed || got.StateReason != sandbox.ReasonTimeout {
			t.Errorf("Got(after its lifetime) = %s %q; want destroyed, timeout", got.State, got.StateReason)
		}
		if over := got.EndedAt.Sub(got.ExpiresAt); over > 10*time.Second {
			t.Errorf("Got(ended %v after its lifetime); want within the sync interval and a destroy", over)
		}
		evs, _ := e.service().Events(ctx, e.a.ID, sb.ID)
		if last := evs[len(evs)-1]; last.State != sandbox.StateDestroyed || last.Reason != sandbox.ReasonTimeout {
			t.Errorf("Got(last event) = %+v; want destroyed with reason timeout", last)
		}
		e.guestClean(t)
	})
	t.Run("idle", func(t *testing.T) {
		sb := create(t, api, map[string]any{"memory_mib": 64, "idle_timeout_seconds": 2})
		got := e.waitEnded(t, sb.ID, 30*time.Second)
		if got.State != sandbox.StateDestroyed || got.StateReason != agentproto.ReasonIdle {
			t.Errorf("Got(after 2 s idle) = %s %q; want destroyed, idle", got.State, got.StateReason)
		}
		evs, _ := e.service().Events(ctx, e.a.ID, sb.ID)
		var states []string
		for _, ev := range evs {
			states = append(states, string(ev.State)+":"+ev.Reason)
		}
		if strings.Join(states, " ") != "creating:requested running:started stopped:idle destroyed:idle" {
			t.Errorf("Got(timeline) = %v; want creating, running, stopped (idle), destroyed (idle)", states)
		}
		if evs := e.events(t, e.a.ID, audit.TypeSandboxStopped, sb.ID); len(evs) != 1 {
			t.Errorf("Got(sandbox.stopped events) = %d; want 1", len(evs))
		}
	})
	t.Run("memory bomb", func(t *testing.T) {
		bomb := create(t, api, map[string]any{"memory_mib": 32})
		defer destroy(t, api, bomb.ID)
		neighbour := create(t, api, map[string]any{"memory_mib": 64})
		defer destroy(t, api, neighbour.ID)
		r := execIn(t, api, bomb.ID, map[string]any{"cmd": []string{"sh", "-c", `x=$(head -c 100000000 /dev/zero | tr '\0' a); echo survived`}})
		if r.Reason != agentproto.ReasonOOM || strings.Contains(r.Stdout, "survived") {
			t.Errorf("Got(memory bomb in 32 MiB) = %+v; want it ended for oom", r)
		}
		if r := execIn(t, api, neighbour.ID, map[string]any{"cmd": []string{"echo", "fine"}}); r.Stdout != "fine\n" {
			t.Errorf("Got(neighbour after the bomb) = %+v; want it running", r)
		}
	})
	t.Run("command", func(t *testing.T) {
		sb := create(t, api, map[string]any{"memory_mib": 64})
		defer destroy(t, api, sb.ID)
		start := time.Now()
		r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sleep", "30"}, "timeout_seconds": 1})
		if r.Reason != "timeout" || r.ExitCode == 0 || time.Since(start) > 10*time.Second {
			t.Errorf("Got(sleep 30 with a 1 s timeout) = %+v after %v; want killed for timeout", r, time.Since(start))
		}
		if r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"true"}}); r.ExitCode != 0 {
			t.Errorf("Got(a command after the timeout) = %+v; want the sandbox still usable", r)
		}
	})
}

// testIsolation walks every sandbox route of the route table: tenant B
// (token and session) gets 404 for A's real, running sandbox and changes
// nothing; A gets 404 for B's.
func (e *testEnv) testIsolation(t *testing.T) {
	apiA := e.api(e.tokA)
	mine := create(t, apiA, map[string]any{"memory_mib": 64})
	defer func() {
		if e.sandbox(t, mine.ID).State == sandbox.StateRunning {
			destroy(t, apiA, mine.ID)
		}
	}()
	if s, body, _ := call(t, apiA, http.MethodPut, "/api/v1/sandboxes/"+mine.ID+"/files?path=iso.txt", []byte("tenant A's file")); s != http.StatusOK {
		t.Fatalf("PUT = %d %s", s, body)
	}
	// B's sandbox is a record (B boots no VM here): an ended one, which the
	// running service's background loop leaves alone.
	theirs := sandboxtest.RecordState(t, e.db, e.b.ID, "bob@b.test", sandbox.StateDestroyed)
	w := e.webEnv()
	callers := []struct {
		name   string
		c      *webtest.Client
		api    bool
		target string
	}{
		{"B token on A's sandbox", w.WithToken(e.tokB), true, mine.ID},
		{"B session on A's sandbox", w.Login(t, "bob@b.test"), false, mine.ID},
		{"A token on B's sandbox", apiA, true, theirs.ID},
		{"A session on B's sandbox", w.Login(t, "ann@a.test"), false, theirs.ID},
	}
	n := 0
	for _, r := range w.App.RouteTable() {
		if !strings.Contains(r.Path, "/sandboxes/:id") {
			continue
		}
		n++
		// A route whose service does not run in this environment (one that
		// answers 503 even for an id that exists nowhere) is another
		// package's to test.
		probe := callers[2].c
		if !r.API {
			probe = callers[3].c
		}
		if s, body, _ := call(t, probe, r.Method, strings.Replace(r.Path, ":id", "01900000-0000-7000-8000-000000000000", 1), nil); s == http.StatusServiceUnavailable {
			t.Logf("%s %s: its service does not run here: %.150s", r.Method, r.Path, body)
			continue
		}
		for _, cl := range callers {
			if cl.api && !r.API {
				continue
			}
			t.Run(r.Method+" "+r.Path+"/"+cl.name, func(t *testing.T) {
				path := strings.Replace(r.Path, ":id", cl.target, 1)
				var in any
				switch {
				case strings.HasSuffix(r.Path, "/files"):
					path += "?path=iso.txt"
					if r.Method == http.MethodPut {
						in = []byte("overwritten by the other tenant")
					}
				case strings.HasSuffix(r.Path, "/exec"):
					in = map[string]any{"cmd": []string{"sh", "-c", "echo pwned > /workspace/iso.txt"}}
				case r.API && r.Method == http.MethodPost:
					// A JSON body, well formed and empty: the tenant check
					// answers, not the body's media type.
					in = map[string]any{}
				}
				before := counts(t, e.db)
				snap := e.snapshot(t, cl.target)
				var status int
				var body string
				if !r.API && r.Method == http.MethodPost {
					status, body, _ = cl.c.Post(t, path, url.Values{})
				} else {
					status, body, _ = call(t, cl.c, r.Method, path, in)
				}
				if status != http.StatusNotFound {
					t.Errorf("Got(status) = %d %.200s; want 404", status, body)
				}
				// A problem document names the request path (its instance),
				// and nothing else of the sandbox.
				if strings.Contains(body, "tenant A's file") || strings.Contains(body, `"vm_id"`) || strings.Contains(body, "busybox") {
					t.Errorf("Got(body) = %.300s; want nothing of the other tenant's sandbox", body)
				}
				sameCounts(t, e.db, before, "a cross-tenant call")
				if after := e.snapshot(t, cl.target); after != snap {
					t.Errorf("Got(sandbox after) = %s; want unchanged %s", after, snap)
				}
			})
		}
	}
	if n < 8 {
		t.Errorf("Got(sandbox routes with an id) = %d; want 8 or more", n)
	}
	if s, got, _ := call(t, apiA, http.MethodGet, "/api/v1/sandboxes/"+mine.ID+"/files?path=iso.txt", nil); s != http.StatusOK || got != "tenant A's file" {
		t.Errorf("Got(A's file after the attempts) = %d %q; want it untouched", s, got)
	}
	// Lists: B's shows nothing of A.
	for _, path := range []string{"/api/v1/sandboxes", "/sandboxes", "/sandboxes/table"} {
		c := w.WithToken(e.tokB)
		if !strings.HasPrefix(path, "/api/") {
			c = callers[1].c
		}
		s, body, _ := call(t, c, http.MethodGet, path, nil)
		if s != http.StatusOK || strings.Contains(body, mine.ID) || strings.Contains(body, e.a.ID) {
			t.Errorf("Got(B's %s) = %d, has A's sandbox %v; want 200 without it", path, s, strings.Contains(body, mine.ID))
		}
	}
}

// snapshot is what a cross-tenant call must not change: the record, its
// event and command counts, and what the guest says of it.
func (e *testEnv) snapshot(tb testing.TB, id string) string {
	tb.Helper()
	var sb sandbox.Sandbox
	if err := e.db.Take(&sb, "id = ?", id).Error; err != nil {
		tb.Fatal(err)
	}
	var evs, xs int64
	e.db.Model(&sandbox.Event{}).Where("sandbox_id = ?", id).Count(&evs)
	e.db.Model(&sandbox.ExecRecord{}).Where("sandbox_id = ?", id).Count(&xs)
	guest := e.guestSandboxes(tb)[id].State
	return fmt.Sprintf("%s/%s/%d/%v events=%d execs=%d guest=%s", sb.State, sb.StateReason, sb.Execs, sb.LastActiveAt, evs, xs, guest)
}

// testPermissions: auditors read sandboxes and their commands, but neither
// create, run commands, move files nor destroy.
func (e *testEnv) testPermissions(t *testing.T) {
	api := e.api(e.tokA)
	sb := create(t, api, map[string]any{"memory_mib": 64})
	defer destroy(t, api, sb.ID)
	aud := e.api(e.tokAAud)
	if s, body, _ := call(t, aud, http.MethodGet, "/api/v1/sandboxes/"+sb.ID, nil); s != http.StatusOK {
		t.Errorf("Got(auditor GET) = %d %s; want 200", s, body)
	}
	before := counts(t, e.db)
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/v1/sandboxes"}, {"POST", "/api/v1/sandboxes/" + sb.ID + "/exec"}, {"DELETE", "/api/v1/sandboxes/" + sb.ID},
		{"GET", "/api/v1/sandboxes/" + sb.ID + "/files?path=a"}, {"PUT", "/api/v1/sandboxes/" + sb.ID + "/files?path=a"},
	} {
		if s, body, hdr := call(t, aud, c.method, c.path, `{"cmd":["true"]}`); s != http.StatusForbidden {
			t.Errorf("Got(auditor %s %s) = %d %s; want 403", c.method, c.path, s, body)
		} else if p := decodeProblem(t, hdr, body); p.Detail == "" {
			t.Errorf("Got(403 problem) = %+v; want it to say why", p)
		}
	}
	// Denials are audited (auth.access_denied); nothing of the sandbox changed.
	after := counts(t, e.db)
	for _, table := range []string{"sandboxes", "sandbox_events", "sandbox_execs"} {
		if after[table] != before[table] {
			t.Errorf("Got(%s after denied calls) = %d; want %d", table, after[table], before[table])
		}
	}
}

func (e *testEnv) testPages(t *testing.T) {
	w := e.webEnv()
	ann := w.Login(t, "ann@a.test")
	s, page := ann.GetPage(t, "/sandboxes")
	if s != http.StatusOK || !containsAll(page, `action="/sandboxes"`, `name="template"`, `name="memory_mib"`, `name="timeout_minutes"`, `hx-get="/sandboxes/table"`) {
		t.Fatalf("GET /sandboxes = %d; want the create form and the polled table: %.400s", s, page)
	}
	if strings.Contains(page, "<script>") || strings.Contains(page, " onclick=") {
		t.Errorf("Got(page) with inline script; want none (CSP)")
	}

	t.Run("form errors in place", func(t *testing.T) {
		before := counts(t, e.db)
		s, page, _ := ann.Post(t, "/sandboxes", url.Values{"template": {"busybox"}, "vcpus": {"1"}, "memory_mib": {"99999"}, "timeout_minutes": {"5"}})
		if s != http.StatusUnprocessableEntity || !containsAll(page, `id="sandbox-memory-mib-error"`, `aria-invalid="true"`, `value="99999"`) {
			t.Errorf("Got(form with too much memory) = %d; want 422 with the error next to the field and the value kept: %.600s", s, page)
		}
		s, page, _ = ann.Post(t, "/sandboxes", url.Values{"template": {"nope"}, "vcpus": {"1"}, "memory_mib": {"64"}, "timeout_minutes": {"x"}})
		if s != http.StatusUnprocessableEntity || !strings.Contains(page, `id="sandbox-timeout-minutes-error"`) {
			t.Errorf("Got(form with a bad timeout) = %d; want 422 naming timeout_minutes", s)
		}
		sameCounts(t, e.db, before, "rejected forms")
	})

	var id string
	t.Run("create from the form", func(t *testing.T) {
		s, _, hdr := ann.Post(t, "/sandboxes", url.Values{"template": {"busybox"}, "vcpus": {"1"}, "memory_mib": {"64"}, "timeout_minutes": {"10"}})
		loc := hdr.Get("Location")
		if s != http.StatusSeeOther || !strings.HasPrefix(loc, "/sandboxes/") {
			t.Fatalf("Got(create from the form) = %d %q; want 303 to the sandbox", s, loc)
		}
		id = strings.TrimPrefix(loc, "/sandboxes/")
		if sb := e.sandbox(t, id); sb.State != sandbox.StateRunning || sb.TimeoutSeconds != 600 {
			t.Errorf("Got(sandbox) = %s, %d s; want running with a 600 s lifetime", sb.State, sb.TimeoutSeconds)
		}
	})
	if id == "" {
		return
	}
	execIn(t, e.api(e.tokA), id, map[string]any{"cmd": []string{"sh", "-c", "echo '<b>visible</b> output'; echo oops >&2; exit 2"}})

	t.Run("sandbox page", func(t *testing.T) {
		s, page := ann.GetPage(t, "/sandboxes/"+id)
		want := []string{id, "busybox", "64 MiB", `data-state="creating"`, `data-state="running"`, "requested",
			"&lt;b&gt;visible&lt;/b&gt; output", "oops", "exit 2", `hx-get="/sandboxes/` + id + `/live"`, "/sandboxes/" + id + "/destroy", shortOf(e.warmVM)}
		if s != http.StatusOK || !containsAll(page, want...) {
			for _, w := range want {
				if !strings.Contains(page, w) {
					t.Errorf("Got(sandbox page) without %q", w)
				}
			}
		}
		if strings.Contains(page, "<b>visible</b>") {
			t.Error("Got(command output) unescaped; want it shown as text")
		}
		s, frag := ann.GetPage(t, "/sandboxes/table")
		if s != http.StatusOK || !strings.Contains(frag, `data-sandbox="`+id+`"`) || strings.Contains(frag, "<html") {
			t.Errorf("Got(table fragment) = %d; want the row alone, no page around it", s)
		}
	})

	t.Run("destroy from the page", func(t *testing.T) {
		s, _, hdr := ann.Post(t, "/sandboxes/"+id+"/destroy", url.Values{"confirm": {"yes"}})
		if s != http.StatusSeeOther || hdr.Get("Location") != "/sandboxes/"+id {
			t.Fatalf("Got(destroy) = %d %s; want 303 back to the sandbox", s, hdr.Get("Location"))
		}
		_, page := ann.GetPage(t, "/sandboxes/"+id)
		if !strings.Contains(page, `data-state="destroyed"`) || strings.Contains(page, `hx-get="/sandboxes/`+id+`/live"`) {
			t.Errorf("Got(page after destroy) without the destroyed state, or still polling")
		}
	})
}

func shortOf(id string) string { return id[len(id)-12:] }

// testCLI runs the real stockade binary against the server.
func (e *testEnv) testCLI(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "stockade")
	build := exec.Command("go", "build", "-o", bin, "./cmd/stockade")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build stockade: %v\n%s", err, out)
	}
	w := e.webEnv()
	cli := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "STOCKADE_URL="+w.URL, "STOCKADE_TOKEN="+e.tokADev)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	out, errs, code := cli("", "sandbox", "create", "--template", "busybox", "--memory", "64", "--timeout", "10m", "--env", "WHO=cli")
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 36 {
		t.Fatalf("Got(sandbox create) = %q %q exit %d; want the id", out, errs, code)
	}
	if out, _, _ := cli("", "sandbox", "ls"); !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Errorf("Got(sandbox ls) = %q; want the sandbox, running", out)
	}
	out, errs, code = cli("", "sandbox", "exec", id, "--", "sh", "-c", "echo hi $WHO; echo warn >&2; exit 5")
	if code != 5 || out != "hi cli\n" || errs != "warn\n" {
		t.Errorf("Got(sandbox exec) = %q %q exit %d; want hi cli, warn, exit 5", out, errs, code)
	}
	if out, _, code := cli("from stdin", "sandbox", "exec", "-i", id, "--", "cat"); code != 0 || out != "from stdin" {
		t.Errorf("Got(exec -i cat) = %q exit %d; want stdin back", out, code)
	}
	local := filepath.Join(t.TempDir(), "up.txt")
	os.WriteFile(local, []byte("copied in\n"), 0o640)
	if _, errs, code := cli("", "sandbox", "cp", local, id+":/workspace/up.txt"); code != 0 {
		t.Fatalf("Got(cp in) = %q exit %d", errs, code)
	}
	back := filepath.Join(t.TempDir(), "back.txt")
	if _, errs, code := cli("", "sandbox", "cp", id+":up.txt", back); code != 0 {
		t.Fatalf("Got(cp out) = %q exit %d", errs, code)
	}
	if b, _ := os.ReadFile(back); string(b) != "copied in\n" {
		t.Errorf("Got(round trip through cp) = %q; want the file", b)
	}
	if out, _, _ := cli("", "sandbox", "exec", id, "--", "stat", "-c", "%a", "up.txt"); out != "640\n" {
		t.Errorf("Got(mode of the copied file) = %q; want the local file's 640", out)
	}
	_, errs, code = cli("", "sandbox", "cp", id+":../etc/passwd", "-")
	if code == 0 || !strings.Contains(errs, "422") || !strings.Contains(errs, "path") {
		t.Errorf("Got(cp with ..) = %q exit %d; want a clear 422 naming path", errs, code)
	}
	_, errs, code = cli("", "sandbox", "create", "--template", "nope")
	if code == 0 || !strings.Contains(errs, "template") || !strings.Contains(errs, "available") {
		t.Errorf("Got(create with an unknown template) = %q exit %d; want the problem printed", errs, code)
	}
	if out, errs, code := cli("", "sandbox", "rm", id); code != 0 || strings.TrimSpace(out) != id {
		t.Errorf("Got(sandbox rm) = %q %q exit %d", out, errs, code)
	}
	if _, errs, code := cli("", "sandbox", "exec", id, "--", "true"); code == 0 || !strings.Contains(errs, "409") {
		t.Errorf("Got(exec after rm) = %q exit %d; want 409 printed", errs, code)
	}
	e.guestClean(t)
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), ".."))
}

// testPlacement: sandboxes share a VM while it has room; when none has,
// a second VM boots (within the pool) and is released when emptied.
func (e *testEnv) testPlacement(t *testing.T) {
	api := e.api(e.tokA)
	small := create(t, api, map[string]any{"memory_mib": 64})
	defer destroy(t, api, small.ID)
	other := create(t, api, map[string]any{"memory_mib": 64})
	if other.VMID != small.VMID || small.VMID != e.warmVM {
		t.Errorf("Got(vms of two small sandboxes) = %s, %s; want both on the warm vm %s", small.VMID, other.VMID, e.warmVM)
	}
	destroy(t, api, other.ID)
	begin := time.Now()
	big := create(t, api, map[string]any{"memory_mib": 1900})
	t.Logf("MEASURED create with a vm boot: %v", time.Since(begin).Round(time.Millisecond))
	if big.VMID == e.warmVM {
		t.Fatalf("Got(vm of a sandbox that does not fit next to another) = the warm vm; want a new one")
	}
	if r := execIn(t, api, big.ID, map[string]any{"cmd": []string{"echo", "on the second vm"}}); r.Stdout != "on the second vm\n" {
		t.Errorf("Got(exec on the second vm) = %+v", r)
	}
	if evs := e.events(t, e.a.ID, audit.TypeVMCreated, big.VMID); len(evs) != 1 {
		t.Errorf("Got(vm.created of the booted vm) = %d; want 1", len(evs))
	}
	destroy(t, api, big.ID)
	vm, err := e.pools().VM(ctx, e.a.ID, big.VMID)
	if err != nil || vm.State != vmpool.StateRunning || vm.AcquiredAt != nil {
		t.Errorf("Got(second vm after its sandbox) = %+v, %v; want running and idle again", vm, err)
	}
	if _, err := e.pools().Destroy(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, e.a.ID, big.VMID); err != nil {
		t.Errorf("destroy the second vm: %v", err)
	}
}

// testRestart: closing and starting the services again leaves a running
// sandbox running and usable, adopted without a new event.
func (e *testEnv) testRestart(t *testing.T) {
	api := e.api(e.tokA)
	sb := create(t, api, map[string]any{"memory_mib": 64})
	execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "echo kept > kept.txt"}})
	evsBefore, _ := e.service().Events(ctx, e.a.ID, sb.ID)
	e.stop()
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	api = e.api(e.tokA)
	if got := e.sandbox(t, sb.ID); got.State != sandbox.StateRunning {
		t.Fatalf("Got(sandbox after restart) = %s %q; want running", got.State, got.StateReason)
	}
	if r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"cat", "kept.txt"}}); r.Stdout != "kept\n" {
		t.Errorf("Got(file after restart) = %q; want kept (the same sandbox)", r.Stdout)
	}
	if evs, _ := e.service().Events(ctx, e.a.ID, sb.ID); len(evs) != len(evsBefore) {
		t.Errorf("Got(events after restart) = %d; want %d (nothing happened to it)", len(evs), len(evsBefore))
	}
	destroy(t, api, sb.ID)
}

// testKill kills the control plane mid-create twice (right after the record,
// and while the agent creates it): after the restart each sandbox is
// adopted or ended with a reason, and the guest holds nothing else.
func (e *testEnv) testKill(t *testing.T) {
	for _, tt := range []struct {
		name string
		at   func(sandbox.Sandbox) bool
	}{
		{"as soon as recorded", func(sandbox.Sandbox) bool { return true }},
		{"while the agent creates it", func(sb sandbox.Sandbox) bool { return sb.VMID != "" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "kill-" + strings.ReplaceAll(tt.name, " ", "-") + "-" + time.Now().Format("150405.000000")
			sb := e.killMidCreate(t, tt.at, key)
			deadline := time.Now().Add(60 * time.Second)
			var got sandbox.Sandbox
			for {
				got = e.sandbox(t, sb.ID)
				if got.State != sandbox.StateCreating || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("after the restart: %s (%s)", got.State, got.StateReason)
			// The client that sent the create finds its sandbox by the key,
			// written with the row before any VM work.
			var found struct {
				Sandboxes []wire.Sandbox `json:"sandboxes"`
			}
			if s, b := e.api(e.tokA).JSON(t, http.MethodGet, "/api/v1/sandboxes?idempotency_key="+url.QueryEscape(key), nil, &found); s != http.StatusOK ||
				len(found.Sandboxes) != 1 || found.Sandboxes[0].ID != sb.ID || found.Sandboxes[0].State != string(got.State) {
				t.Errorf("Got(GET ?idempotency_key=%s after the crash) = %d %s; want sandbox %s, %s", key, s, b, sb.ID, got.State)
			}
			guest := e.guestSandboxes(t)
			switch got.State {
			case sandbox.StateRunning:
				if !strings.HasPrefix(got.StateReason, "adopted") {
					t.Errorf("Got(reason) = %q; want it to say it was adopted", got.StateReason)
				}
				if guest[sb.ID].State != agentproto.SandboxRunning {
					t.Errorf("Got(guest state) = %q; want running", guest[sb.ID].State)
				}
				if r := execIn(t, e.api(e.tokA), sb.ID, map[string]any{"cmd": []string{"echo", "adopted"}}); r.Stdout != "adopted\n" {
					t.Errorf("Got(exec in the adopted sandbox) = %+v", r)
				}
				destroy(t, e.api(e.tokA), sb.ID)
			case sandbox.StateFailed, sandbox.StateDestroyed:
				if got.StateReason == "" {
					t.Errorf("Got(%s sandbox) without a reason; want one", got.State)
				}
				if _, ok := guest[sb.ID]; ok {
					t.Errorf("Got(guest) still holds %s; want nothing orphaned", sb.ID)
				}
			default:
				t.Fatalf("Got(sandbox after restart) = %s %q; want adopted or ended", got.State, got.StateReason)
			}
			e.guestClean(t)
			vm, _ := e.pools().VM(ctx, e.a.ID, e.warmVM)
			if vm.AcquiredAt != nil {
				t.Errorf("Got(warm vm) = acquired with no sandbox on it; want it released")
			}
		})
	}
}
