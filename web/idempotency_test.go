package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// idemPost sends a JSON POST with an Idempotency-Key.
func idemPost(t *testing.T, c *webtest.Client, path, key, body string) (int, string, http.Header) {
	t.Helper()
	return c.Request(t, http.MethodPost, path, "application/json", strings.NewReader(body), api.IdempotencyHeader, key)
}

func count(t *testing.T, env *webtest.Env, table, where string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := env.DB.Table(table).Where(where, args...).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIdempotentTokenCreate: a retried token create answers the first token
// (Stripe's model) and makes no second one; the cached answer is sealed at
// rest, never the token in clear.
func TestIdempotentTokenCreate(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now().UTC())
	env := webtest.New(t, webtest.Options{Clock: clock})
	tn, other := env.Tenant(t, "idem-tok"), env.Tenant(t, "idem-tok-2")
	admin := env.WithToken(env.Token(t, tn, tenants.RoleAdmin))
	otherAdmin := env.WithToken(env.Token(t, other, tenants.RoleAdmin))
	const body = `{"name":"ci-bot","role":"developer","ttl":"7d"}`

	s1, b1, h1 := idemPost(t, admin, "/api/v1/tokens", "key-1", body)
	var first struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(b1), &first); s1 != http.StatusCreated || err != nil || first.Token == "" {
		t.Fatalf("Got(first POST /api/v1/tokens) = %d %s; want 201 with the token", s1, b1)
	}
	if h1.Get(api.ReplayedHeader) != "" {
		t.Errorf("Got(%s on the first answer) = %q; want none", api.ReplayedHeader, h1.Get(api.ReplayedHeader))
	}
	s2, b2, h2 := idemPost(t, admin, "/api/v1/tokens", "key-1", body)
	if s2 != http.StatusCreated || b2 != strings.TrimRight(b1, "\n") || h2.Get(api.ReplayedHeader) != "true" {
		t.Fatalf("Got(retry) = %d %s (replayed %q); want 201 with the first answer, replayed", s2, b2, h2.Get(api.ReplayedHeader))
	}
	if h2.Get("Cache-Control") != "no-store" {
		t.Errorf("Got(Cache-Control of a replayed token) = %q; want no-store", h2.Get("Cache-Control"))
	}
	if n := count(t, env, "api_tokens", "tenant_id = ? AND name = ?", tn.ID, "ci-bot"); n != 1 {
		t.Errorf("Got(tokens named ci-bot after a retry) = %d; want 1", n)
	}
	// The cached answer holds no token in clear.
	var cached []string
	env.DB.Table("idempotency_keys").Where("tenant_id = ?", tn.ID).Pluck("response_body", &cached)
	if len(cached) != 1 || strings.Contains(cached[0], first.Token) || !strings.HasPrefix(cached[0], "v1:") {
		t.Errorf("Got(cached answers) = %d, sealed %v; want one, sealed, without the token", len(cached), len(cached) == 1 && strings.HasPrefix(cached[0], "v1:"))
	}

	// The same key for another body: 422 naming the header, nothing made.
	s, b, _ := idemPost(t, admin, "/api/v1/tokens", "key-1", `{"name":"other","role":"developer","ttl":"7d"}`)
	p := webtest.Problem(t, http.Header{"Content-Type": {"application/problem+json"}}, b)
	if s != http.StatusUnprocessableEntity || len(p.Errors) != 1 || p.Errors[0].Field != api.IdempotencyHeader {
		t.Errorf("Got(key reused for another body) = %d %s; want 422 naming %s", s, b, api.IdempotencyHeader)
	}
	if n := count(t, env, "api_tokens", "tenant_id = ? AND name = ?", tn.ID, "other"); n != 0 {
		t.Errorf("Got(tokens named other) = %d; want 0", n)
	}
	// Another tenant's same key is its own.
	s, b, _ = idemPost(t, otherAdmin, "/api/v1/tokens", "key-1", body)
	if s != http.StatusCreated || strings.Contains(b, first.Token) {
		t.Errorf("Got(other tenant, same key) = %d; want 201 with a token of its own", s)
	}
	// A malformed key is refused, naming the header.
	s, b, _ = idemPost(t, admin, "/api/v1/tokens", "has space", body)
	if s != http.StatusUnprocessableEntity || !strings.Contains(b, `"field":"Idempotency-Key"`) {
		t.Errorf("Got(malformed key) = %d %s; want 422 naming Idempotency-Key", s, b)
	}
	// A failed create keeps nothing: fixed and retried, it runs.
	s, _, _ = idemPost(t, admin, "/api/v1/tokens", "key-bad", `{"name":"x","role":"emperor","ttl":"7d"}`)
	if s != http.StatusUnprocessableEntity {
		t.Fatalf("Got(invalid role) = %d; want 422", s)
	}
	if n := count(t, env, "idempotency_keys", "idem_key = ?", "key-bad"); n != 0 {
		t.Errorf("Got(keys kept for a failed create) = %d; want 0", n)
	}
	// After 24 h the key is forgotten: the same request makes a new token.
	clock.Advance(24*time.Hour + time.Minute)
	s, b, h := idemPost(t, admin, "/api/v1/tokens", "key-1", body)
	if s != http.StatusCreated || h.Get(api.ReplayedHeader) != "" || strings.Contains(b, first.Token) {
		t.Errorf("Got(same key after 24 h) = %d replayed %q; want 201, a new token", s, h.Get(api.ReplayedHeader))
	}
	if n := count(t, env, "api_tokens", "tenant_id = ? AND name = ?", tn.ID, "ci-bot"); n != 2 {
		t.Errorf("Got(tokens named ci-bot after the key expired) = %d; want 2", n)
	}
}

// TestIdempotentRunCreate: a retried manual run create answers the first
// run; one run is recorded.
func TestIdempotentRunCreate(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	tn := env.Tenant(t, "idem-run")
	admin := env.WithToken(env.Token(t, tn, tenants.RoleAdmin))
	dev := env.WithToken(env.Token(t, tn, tenants.RoleDeveloper))
	if s, b, _ := admin.Request(t, http.MethodPut, "/api/v1/workflows/api-tests", "application/yaml", strings.NewReader(apiWorkflow)); s != http.StatusOK {
		t.Fatalf("PUT workflow = %d %s", s, b)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		s, b, _ := idemPost(t, dev, "/api/v1/workflows/api-tests/runs", "run-key", `{"ref":"main"}`)
		var run struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(b), &run); s != http.StatusCreated || err != nil {
			t.Fatalf("Got(POST run #%d) = %d %s; want 201", i+1, s, b)
		}
		ids = append(ids, run.ID)
	}
	if ids[0] == "" || ids[1] != ids[0] || ids[2] != ids[0] {
		t.Errorf("Got(run ids of three tries) = %v; want one id", ids)
	}
	if n := count(t, env, "workflow_runs", "tenant_id = ?", tn.ID); n != 1 {
		t.Errorf("Got(runs recorded) = %d; want 1", n)
	}
	// Another path with the same key is another request: refused.
	if s, b, _ := idemPost(t, dev, "/api/v1/workflows/api-tests/runs", "run-key", `{"ref":"dev"}`); s != http.StatusUnprocessableEntity {
		t.Errorf("Got(same key, another ref) = %d %s; want 422", s, b)
	}
}

// TestIdempotentSandboxAfterCrash: the server that ran a create stopped
// after recording the sandbox (its key pending, the next start adopted the
// sandbox). The client's retry answers that sandbox and makes none; a GET
// filter finds it too.
func TestIdempotentSandboxAfterCrash(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	tn, other := env.Tenant(t, "idem-sbx"), env.Tenant(t, "idem-sbx-2")
	agentSecret, agentTok := env.NewToken(t, tn, "agent", tenants.RoleDeveloper)
	agent := env.WithToken(agentSecret)
	otherDev := env.WithToken(env.Token(t, other, tenants.RoleDeveloper))
	const body = `{"template":"busybox"}`

	sb := sandboxtest.Record(t, env.DB, tn.ID, agentTok.ID)
	if err := env.DB.Model(&sandbox.Sandbox{}).Where("id = ?", sb.ID).Update("idempotency_key", "crash-key").Error; err != nil {
		t.Fatal(err)
	}
	// What the crashed server left: the key pending in its name.
	_, begun, err := env.Store.BeginIdempotent(context.Background(), tenants.IdemRequest{TenantID: tn.ID, Principal: agentTok.ID,
		Route: "POST /api/v1/sandboxes", Key: "crash-key", RequestHash: handlers.IdempotencyHash(http.MethodPost, "/api/v1/sandboxes", "", []byte(body)),
		Owner: "a-server-that-crashed"})
	if err != nil || !begun {
		t.Fatalf("record the pending key = %v, %v", begun, err)
	}
	for i := 0; i < 2; i++ {
		s, b, h := idemPost(t, agent, "/api/v1/sandboxes", "crash-key", body)
		var got struct {
			ID    string `json:"id"`
			State string `json:"state"`
			Key   string `json:"idempotency_key"`
		}
		if err := json.Unmarshal([]byte(b), &got); s != http.StatusCreated || err != nil || got.ID != sb.ID || got.Key != "crash-key" {
			t.Fatalf("Got(retry #%d after the crash) = %d %s; want 201 with sandbox %s", i+1, s, b, sb.ID)
		}
		if h.Get("Location") != "/api/v1/sandboxes/"+sb.ID {
			t.Errorf("Got(Location) = %q; want the sandbox", h.Get("Location"))
		}
	}
	if n := count(t, env, "sandboxes", "tenant_id = ?", tn.ID); n != 1 {
		t.Errorf("Got(sandboxes after the retries) = %d; want 1", n)
	}
	// The GET filter finds it; another tenant's filter does not.
	var list struct {
		Sandboxes []struct {
			ID string `json:"id"`
		} `json:"sandboxes"`
	}
	if s, b := agent.JSON(t, http.MethodGet, "/api/v1/sandboxes?idempotency_key=crash-key", nil, &list); s != http.StatusOK ||
		len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Errorf("Got(GET ?idempotency_key=crash-key) = %d %s; want the one sandbox", s, b)
	}
	list.Sandboxes = nil
	if s, b := otherDev.JSON(t, http.MethodGet, "/api/v1/sandboxes?idempotency_key=crash-key", nil, &list); s != http.StatusOK || len(list.Sandboxes) != 0 {
		t.Errorf("Got(other tenant's GET ?idempotency_key=crash-key) = %d %s; want none", s, b)
	}
}
