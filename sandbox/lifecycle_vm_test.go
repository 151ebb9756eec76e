package sandbox_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// TestLifecycleWebhooks (real VMs): with an endpoint of the tenant
// subscribed, creating and destroying a sandbox delivers sandbox.created and
// sandbox.destroyed, signed per Standard Webhooks, the second with the
// reason and the usage the ledger holds for the sandbox.
func TestLifecycleWebhooks(t *testing.T) {
	e := need(t)
	admin := audit.Actor{Kind: audit.ActorUser, ID: "hooks-admin", Name: "hooks admin"}
	key := make([]byte, 32)
	rand.Read(key)
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(key)
	root := make([]byte, 32)
	rand.Read(root)
	ss, err := secrets.New(e.db, root, secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Create(ctx, admin, e.a.ID, secrets.NewSecret{Name: "LIFECYCLE_HOOK", Value: whsec, Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	defer ss.Revoke(ctx, admin, e.a.ID, "LIFECYCLE_HOOK")

	type got struct {
		header http.Header
		body   []byte
	}
	var (
		mu   sync.Mutex
		hits []got
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hits = append(hits, got{r.Header.Clone(), b})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()

	hooks := integrations.NewStore(e.db, integrations.Config{AllowPrivate: true})
	ep, err := hooks.Create(ctx, admin, e.a.ID, integrations.NewEndpoint{URL: rcv.URL + "/lifecycle", SecretName: "LIFECYCLE_HOOK",
		EventTypes: []string{integrations.EventSandboxCreated, integrations.EventSandboxDestroyed}})
	if err != nil {
		t.Fatal(err)
	}
	defer hooks.Delete(ctx, admin, e.a.ID, ep.ID)
	sender := notify.New(e.db, notify.HostScoped(ss), notify.Config{AllowPrivate: true, Backoff: []time.Duration{100 * time.Millisecond}})
	dctx, stop := context.WithCancel(ctx)
	disp := integrations.NewDispatcher(hooks, sender, integrations.DispatcherConfig{Interval: 100 * time.Millisecond, Logger: e.log})
	done := make(chan struct{})
	go func() { disp.Run(dctx); close(done) }()
	defer func() { stop(); <-done }()

	// A second service on the same database and pools, with the outbox: the
	// shared one (without) keeps syncing every sandbox.
	svc := sandbox.New(e.db, e.pools(), sandbox.Config{DataDir: e.dataDir, Logger: e.log, DefaultTemplate: "busybox", Outbox: hooks})
	defer svc.Close()
	sb, err := svc.Create(ctx, admin, e.a.ID, sandbox.Spec{MemoryMiB: 64, Metadata: map[string]string{"purpose": "lifecycle"}})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	// Some CPU time to account.
	if _, err := svc.Exec(ctx, admin, e.a.ID, sb.ID, sandbox.ExecRequest{Cmd: []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"}},
		io.Discard, io.Discard); err != nil {
		t.Fatalf("Exec = %v", err)
	}
	time.Sleep(time.Second) // held for a measurable while
	if _, err := svc.Destroy(ctx, admin, e.a.ID, sb.ID); err != nil {
		t.Fatalf("Destroy = %v", err)
	}

	bodies := map[string][]byte{}
	deadline := time.Now().Add(30 * time.Second)
	for len(bodies) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("Got(events delivered) = %d within 30 s; want 2", len(bodies))
		}
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		for _, h := range hits {
			var env struct {
				Type string `json:"type"`
				Data struct {
					SandboxID string `json:"sandbox_id"`
				} `json:"data"`
			}
			if err := json.Unmarshal(h.body, &env); err != nil {
				t.Fatalf("decode %s: %v", h.body, err)
			}
			if env.Data.SandboxID != sb.ID {
				continue // another test's sandbox of this tenant
			}
			if err := verifyStandardWebhook(whsec, h.header, h.body); err != nil {
				t.Errorf("Got(verify %s) = %v; want nil", env.Type, err)
			}
			if _, dup := bodies[env.Type]; dup {
				t.Errorf("Got(%s) twice; want once", env.Type)
			}
			bodies[env.Type] = h.body
		}
		hits = hits[:0]
		mu.Unlock()
	}

	var created struct {
		Data sandbox.CreatedEvent `json:"data"`
	}
	if err := json.Unmarshal(bodies[integrations.EventSandboxCreated], &created); err != nil {
		t.Fatal(err)
	}
	if c := created.Data; c.Template != "busybox" || c.MemoryMiB != 64 || c.VCPUs < 1 || c.CreatedBy != admin.Name || c.Metadata["purpose"] != "lifecycle" {
		t.Errorf("Got(sandbox.created) = %+v; want busybox, 64 MiB, by %s, with its metadata", c, admin.Name)
	}
	var destroyed struct {
		Data sandbox.DestroyedEvent `json:"data"`
	}
	if err := json.Unmarshal(bodies[integrations.EventSandboxDestroyed], &destroyed); err != nil {
		t.Fatal(err)
	}
	dd := destroyed.Data
	if dd.State != sandbox.StateDestroyed || dd.Reason != sandbox.ReasonRequested || dd.EndedAt == nil {
		t.Errorf("Got(sandbox.destroyed) = %s (%s), ended %v; want destroyed (requested) with its end", dd.State, dd.Reason, dd.EndedAt)
	}
	// The usage is the ledger's, exactly.
	entries, err := usage.NewStore(e.db, nil).Entries(ctx, e.a.ID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var vcpuMS, mibMS, cpuNS int64
	for _, en := range entries {
		vcpuMS, mibMS, cpuNS = vcpuMS+en.AllocVCPUMS, mibMS+en.AllocMiBMS, cpuNS+en.CPUNS
	}
	u := dd.Usage
	if u.VCPUSeconds < 1 || u.GiBSeconds <= 0 || u.CPUSeconds <= 0 || u.Cost <= 0 || u.Currency == "" {
		t.Errorf("Got(usage) = %+v; want vCPU-s >= 1, GiB-s, CPU-s and cost above 0", u)
	}
	if u.VCPUSeconds != float64(vcpuMS)/1e3 || u.GiBSeconds != float64(mibMS)/1024/1e3 || u.CPUSeconds != float64(cpuNS)/1e9 {
		t.Errorf("Got(usage) = %+v; want the ledger's %d vCPU-ms, %d MiB-ms, %d CPU-ns", u, vcpuMS, mibMS, cpuNS)
	}
	t.Logf("sandbox.destroyed usage: %+v", u)
	dls, err := hooks.Deliveries(ctx, e.a.ID, ep.ID, 50)
	if err != nil {
		t.Fatal(err)
	}
	delivered := 0
	for _, d := range dls {
		if d.State == integrations.DeliveryDelivered && d.StatusCode == http.StatusNoContent {
			delivered++
		}
	}
	if delivered < 2 {
		t.Errorf("Got(delivered rows) = %d of %+v; want at least 2", delivered, dls)
	}
}

// verifyStandardWebhook checks a request as the Standard Webhooks
// specification says a receiver must, independently of our signer.
func verifyStandardWebhook(secret string, h http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp: %w", err)
	}
	if d := time.Now().Unix() - ts; d > 300 || d < -300 {
		return fmt.Errorf("timestamp %d outside tolerance", ts)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.%s", h.Get("webhook-id"), ts, body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(h.Get("webhook-signature")) {
		if v, sig, ok := strings.Cut(s, ","); ok && v == "v1" {
			if b, err := base64.StdEncoding.DecodeString(sig); err == nil && subtle.ConstantTimeCompare(b, want) == 1 {
				return nil
			}
		}
	}
	return fmt.Errorf("no signature matches")
}
