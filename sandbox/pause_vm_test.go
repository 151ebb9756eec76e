package sandbox_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	wire "github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// TestPauseResume (real VM): a busy loop in a sandbox is paused; while
// paused its cgroup CPU time does not grow and the ledger's vCPU-seconds
// stop while its memory-seconds go on; the pause survives a control-plane
// restart (still paused, still not billed vCPU); after the resume the loop
// runs again and a file written before the pause reads back. Bad input:
// resume of a running sandbox, pause twice, another tenant's id, exec and
// file reads while paused; destroy works while paused.
func TestPauseResume(t *testing.T) {
	e := need(t)
	api := e.api(e.tokA)
	sb := create(t, api, map[string]any{"memory_mib": 64, "template": "busybox"})
	defer func() { call(t, e.api(e.tokA), http.MethodDelete, "/api/v1/sandboxes/"+sb.ID, nil) }()
	// The busy loop in its own session: it outlives the exec.
	execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c",
		"echo kept > /workspace/before; setsid sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &"}})
	waitUntil(t, "the loop burning CPU", time.Minute, func() bool { return cgroupCPU(t, e, sb.ID) > 500*time.Millisecond })

	pauseURL, resumeURL := "/api/v1/sandboxes/"+sb.ID+"/pause", "/api/v1/sandboxes/"+sb.ID+"/resume"
	if status, body, _ := call(t, api, http.MethodPost, resumeURL, nil); status != http.StatusConflict {
		t.Errorf("Got(resume a running sandbox) = %d %s; want 409", status, body)
	}
	status, body, _ := call(t, api, http.MethodPost, pauseURL, nil)
	var paused wire.Sandbox
	if status != http.StatusOK || json.Unmarshal([]byte(body), &paused) != nil || paused.PausedAt == nil || paused.State != "running" {
		t.Fatalf("Got(pause) = %d %s; want 200, running with paused_at", status, body)
	}
	if status, body, _ := call(t, api, http.MethodPost, pauseURL, nil); status != http.StatusConflict {
		t.Errorf("Got(pause twice) = %d %s; want 409", status, body)
	}
	if status, body, _ := call(t, e.api(e.tokB), http.MethodPost, pauseURL, nil); status != http.StatusNotFound {
		t.Errorf("Got(pause as another tenant) = %d %s; want 404", status, body)
	}
	if status, body, _ := call(t, e.api(e.tokB), http.MethodPost, resumeURL, nil); status != http.StatusNotFound {
		t.Errorf("Got(resume as another tenant) = %d %s; want 404", status, body)
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/api/v1/sandboxes/" + sb.ID + "/exec"},
		{http.MethodGet, "/api/v1/sandboxes/" + sb.ID + "/files?path=/workspace/before"},
	} {
		var in any
		if r.method == http.MethodPost {
			in = map[string]any{"cmd": []string{"true"}}
		}
		status, body, _ := call(t, api, r.method, r.path, in)
		if status != http.StatusConflict || !strings.Contains(body, "the sandbox is paused; resume it") {
			t.Errorf("Got(%s %s while paused) = %d %s; want 409 saying the sandbox is paused", r.method, r.path, status, body)
		}
	}

	// While paused: no CPU; allocation goes on, memory only.
	cpu0, l0 := cgroupCPU(t, e, sb.ID), ledgerOf(t, e, e.a.ID, sb.ID)
	waitUntil(t, "3 s more of allocation in the ledger", time.Minute, func() bool {
		return ledgerOf(t, e, e.a.ID, sb.ID).WallMS >= l0.WallMS+3000
	})
	checkPaused := func(when string) {
		t.Helper()
		cpu, l := cgroupCPU(t, e, sb.ID), ledgerOf(t, e, e.a.ID, sb.ID)
		t.Logf("%s: cgroup CPU %v (at pause %v); ledger vCPU-s %.3f (at pause %.3f), MiB-s %.1f (at pause %.1f), wall %.3f s",
			when, cpu, cpu0, float64(l.AllocVCPUMS)/1000, float64(l0.AllocVCPUMS)/1000, float64(l.AllocMiBMS)/1000, float64(l0.AllocMiBMS)/1000, l.WallSeconds())
		if cpu != cpu0 {
			t.Errorf("Got(cgroup CPU %s) = %v; want unchanged %v", when, cpu, cpu0)
		}
		if l.AllocVCPUMS != l0.AllocVCPUMS {
			t.Errorf("Got(ledger vCPU-ms %s) = %d; want unchanged %d", when, l.AllocVCPUMS, l0.AllocVCPUMS)
		}
		if l.AllocMiBMS <= l0.AllocMiBMS || l.AllocMiBMS != l.WallMS*int64(sb.MemoryMiB) {
			t.Errorf("Got(ledger MiB-ms %s) = %d; want grown past %d, = wall %d x %d MiB", when, l.AllocMiBMS, l0.AllocMiBMS, l.WallMS, sb.MemoryMiB)
		}
		if l.CPUNS > int64(cpu0) {
			t.Errorf("Got(ledger CPU ns %s) = %d; want at most the cgroup's %d", when, l.CPUNS, int64(cpu0))
		}
	}
	checkPaused("paused")

	// A control-plane restart: still paused, still no vCPU billed.
	e.stop()
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	api = e.api(e.tokA)
	l1 := ledgerOf(t, e, e.a.ID, sb.ID)
	waitUntil(t, "3 s more of allocation after the restart", time.Minute, func() bool {
		return ledgerOf(t, e, e.a.ID, sb.ID).WallMS >= l1.WallMS+3000
	})
	if rec := e.sandbox(t, sb.ID); !rec.Paused() {
		t.Fatalf("Got(record after the restart) = %s, paused_at %v; want running, paused", rec.State, rec.PausedAt)
	}
	if a := e.guestSandboxes(t)[sb.ID]; !a.Paused || a.State != "running" {
		t.Errorf("Got(agent's sandbox after the restart) = %s paused %v; want running, paused", a.State, a.Paused)
	}
	checkPaused("paused, after a restart")
	if status, body, _ := call(t, api, http.MethodPost, pauseURL, nil); status != http.StatusConflict {
		t.Errorf("Got(pause after the restart) = %d %s; want 409", status, body)
	}

	// Resume: the loop runs again, the file is there, vCPU billing goes on,
	// the lifetime moved on by the time paused.
	status, body, _ = call(t, api, http.MethodPost, resumeURL, nil)
	var resumed wire.Sandbox
	if status != http.StatusOK || json.Unmarshal([]byte(body), &resumed) != nil || resumed.PausedAt != nil || resumed.State != "running" {
		t.Fatalf("Got(resume) = %d %s; want 200, running, no paused_at", status, body)
	}
	pausedFor := time.Duration(ledgerOf(t, e, e.a.ID, sb.ID).WallMS-l0.WallMS) * time.Millisecond
	before, _ := time.Parse(time.RFC3339Nano, paused.ExpiresAt)
	after, _ := time.Parse(time.RFC3339Nano, resumed.ExpiresAt)
	if after.Sub(before) < pausedFor-time.Second { // the API's times are whole seconds
		t.Errorf("Got(expires_at after resume) = %s (was %s); want moved on by at least the %v paused", resumed.ExpiresAt, paused.ExpiresAt, pausedFor)
	}
	if status, body, _ := call(t, api, http.MethodPost, resumeURL, nil); status != http.StatusConflict {
		t.Errorf("Got(resume twice) = %d %s; want 409", status, body)
	}
	waitUntil(t, "the loop burning CPU again", time.Minute, func() bool { return cgroupCPU(t, e, sb.ID) > cpu0+500*time.Millisecond })
	if r := execIn(t, api, sb.ID, map[string]any{"cmd": []string{"sh", "-c", "cat /workspace/before; ps -o args | grep -c '[w]hile :'"}}); r.Stdout != "kept\n1\n" {
		t.Errorf("Got(file and loop after resume) = %q; want %q", r.Stdout, "kept\n1\n")
	}
	waitUntil(t, "vCPU-seconds billed again", time.Minute, func() bool {
		return ledgerOf(t, e, e.a.ID, sb.ID).AllocVCPUMS > l0.AllocVCPUMS
	})

	// Destroy works while paused; the paused time is never billed vCPU.
	if status, body, _ := call(t, api, http.MethodPost, pauseURL, nil); status != http.StatusOK {
		t.Fatalf("Got(pause again) = %d %s; want 200", status, body)
	}
	destroy(t, api, sb.ID)
	final := ledgerOf(t, e, e.a.ID, sb.ID)
	if final.AllocMiBMS != final.WallMS*int64(sb.MemoryMiB) || final.AllocVCPUMS > final.WallMS*int64(sb.VCPUs)-int64(sb.VCPUs)*pausedFor.Milliseconds() {
		t.Errorf("Got(final ledger) = %d vCPU-ms, %d MiB-ms over %d ms; want memory for all of it, vCPU for all but the %v paused",
			final.AllocVCPUMS, final.AllocMiBMS, final.WallMS, pausedFor)
	}
	for _, typ := range []string{audit.TypeSandboxPaused, audit.TypeSandboxResumed} {
		if evs := e.events(t, e.a.ID, typ, sb.ID); len(evs) == 0 {
			t.Errorf("Got(%s audit events) = none; want the pause and resume audited", typ)
		}
	}
}
