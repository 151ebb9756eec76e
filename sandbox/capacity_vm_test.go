package sandbox_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	wire "github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// testIdempotentCreate: a create retried with the same Idempotency-Key
// (an agent that timed out) answers the first sandbox and makes no second.
func (e *testEnv) testIdempotentCreate(t *testing.T) {
	api := e.api(e.tokA)
	key := "agent-retry-" + time.Now().Format("150405.000000") // one per run: the database outlives a -count rerun
	post := func(body string) (int, string, http.Header) {
		return api.Request(t, http.MethodPost, "/api/v1/sandboxes", "application/json", strings.NewReader(body), wire.IdempotencyHeader, key)
	}
	s1, b1, _ := post(`{"memory_mib": 64}`)
	var first wire.Sandbox
	if err := json.Unmarshal([]byte(b1), &first); s1 != http.StatusCreated || err != nil || first.State != "running" || first.IdempotencyKey != key {
		t.Fatalf("Got(first create) = %d %s; want 201, running, with its key", s1, b1)
	}
	defer destroy(t, api, first.ID)
	s2, b2, h2 := post(`{"memory_mib": 64}`)
	var second wire.Sandbox
	if err := json.Unmarshal([]byte(b2), &second); s2 != http.StatusCreated || err != nil || second.ID != first.ID || h2.Get(wire.ReplayedHeader) != "true" {
		t.Fatalf("Got(retried create) = %d %s; want 201 with sandbox %s, replayed", s2, b2, first.ID)
	}
	var n int64
	e.db.Model(&sandbox.Sandbox{}).Where("tenant_id = ? AND idempotency_key = ?", e.a.ID, key).Count(&n)
	if n != 1 {
		t.Errorf("Got(sandboxes with the key) = %d; want 1", n)
	}
	if s, b, _ := post(`{"memory_mib": 128}`); s != http.StatusUnprocessableEntity || !strings.Contains(b, wire.IdempotencyHeader) {
		t.Errorf("Got(same key, another body) = %d %s; want 422 naming %s", s, b, wire.IdempotencyHeader)
	}
}

// testBurstBeyondCapacity: tenant A's pool may hold only its one warm VM;
// a burst of creates beyond what it holds gets 429s that write nothing: no
// sandbox row, no failed sandbox, no audit event of one.
func (e *testEnv) testBurstBeyondCapacity(t *testing.T) {
	sys := audit.Actor{Kind: audit.ActorSystem, ID: "test"}
	if _, err := e.pools().SetPool(ctx, sys, e.a.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 2048, MaxVMs: 1, RecycleAfterHours: 24}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := e.pools().SetPool(ctx, sys, e.a.ID, vmpool.PoolSettings{VCPUs: 1, MemoryMiB: 2048, MaxVMs: 2, RecycleAfterHours: 24}); err != nil {
			t.Errorf("restore the pool: %v", err)
		}
	}()
	var before int64
	e.db.Model(&sandbox.Sandbox{}).Where("tenant_id = ?", e.a.ID).Count(&before)
	failedBefore := len(e.events(t, e.a.ID, audit.TypeSandboxFailed, ""))
	// 2048 MiB less the guest's 128: room for 3 of 512 MiB.
	const burst, fit = 6, 3
	api := e.api(e.tokA)
	api.Client.Timeout = 5 * time.Minute // creates at once in one TCG VM, on a busy host
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created []string
		refused []problem
		other   []string
	)
	for i := 0; i < burst; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body, hdr := call(t, api, http.MethodPost, "/api/v1/sandboxes", map[string]any{"memory_mib": 512})
			mu.Lock()
			defer mu.Unlock()
			switch status {
			case http.StatusCreated:
				var sb wire.Sandbox
				json.Unmarshal([]byte(body), &sb)
				created = append(created, sb.ID)
			case http.StatusTooManyRequests:
				refused = append(refused, decodeProblem(t, hdr, body))
			default:
				other = append(other, body)
			}
		}()
	}
	wg.Wait()
	for _, id := range created {
		defer destroy(t, api, id)
	}
	if len(created) != fit || len(refused) != burst-fit || len(other) != 0 {
		t.Fatalf("Got(burst of %d) = %d created, %d refused, others %v; want %d created, %d refused with 429", burst, len(created),
			len(refused), other, fit, burst-fit)
	}
	for _, p := range refused {
		if p.field() != vmpool.QuotaPoolMaxVMs || !strings.Contains(p.Detail, "pool is full") {
			t.Errorf("Got(refusal) = %+v; want it to name %s and say the pool is full", p, vmpool.QuotaPoolMaxVMs)
		}
	}
	var after int64
	e.db.Model(&sandbox.Sandbox{}).Where("tenant_id = ?", e.a.ID).Count(&after)
	if after-before != fit {
		t.Errorf("Got(sandbox rows the burst wrote) = %d; want %d (the refused ones none)", after-before, fit)
	}
	if n := len(e.events(t, e.a.ID, audit.TypeSandboxFailed, "")); n != failedBefore {
		t.Errorf("Got(sandbox.failed events of the burst) = %d; want 0", n-failedBefore)
	}
	if vms, _ := e.pools().List(ctx, e.a.ID); countActive(vms) != 1 {
		t.Errorf("Got(active VMs after the burst) = %d; want the warm one only", countActive(vms))
	}
}

func countActive(sts []vmpool.Status) int {
	n := 0
	for _, st := range sts {
		if st.VM.State.Active() {
			n++
		}
	}
	return n
}
