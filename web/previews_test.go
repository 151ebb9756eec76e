package web_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestPreviewLinkExpiry: on the server's injected clock a preview link
// works until its TTL passes (here found, then 503: this harness has no VM
// behind it) and is a plain 404 after, listed as inactive; a made-up or
// malformed token is the same 404, and none of them reaches a handler that
// says more.
func TestPreviewLinkExpiry(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	env := webtest.New(t, webtest.Options{Clock: clock})
	tn := env.TenantNamed(t, "preview-clock", "Preview Clock")
	api1 := env.WithToken(env.Token(t, tn, tenants.RoleDeveloper))
	sb := sandboxtest.Record(t, env.DB, tn.ID, "dev@preview-clock.test")
	var l api.PreviewLink
	if s, body := api1.JSON(t, http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/previews", api.CreatePreviewLink{Port: 8000, TTLSeconds: 120}, &l); s != http.StatusCreated {
		t.Fatalf("Got(create) = %d; want 201: %s", s, body)
	}
	if want := clock.Now().Add(2 * time.Minute).Format(time.RFC3339); !strings.HasPrefix(l.ExpiresAt, strings.TrimSuffix(want, "Z")) {
		t.Errorf("Got(expires_at) = %s; want %s (the injected clock + ttl)", l.ExpiresAt, want)
	}
	path := strings.TrimPrefix(l.URL, env.URL)
	anon := env.Anonymous()
	for _, c := range []struct {
		name    string
		advance time.Duration
		path    string
		want    int
	}{
		{"fresh: found, then no VM", 0, path, http.StatusServiceUnavailable},
		{"a second before expiry", 119 * time.Second, path, http.StatusServiceUnavailable},
		{"expired", time.Second, path, http.StatusNotFound},
		{"made-up token", 0, "/preview/stkp_" + strings.Repeat("a", 52) + "/", http.StatusNotFound},
		{"malformed token", 0, "/preview/not-a-token/", http.StatusNotFound},
	} {
		clock.Advance(c.advance)
		if s, body, _ := anon.Request(t, http.MethodGet, c.path, "", nil); s != c.want {
			t.Errorf("%s: Got(GET) = %d; want %d: %.200s", c.name, s, c.want, body)
		}
	}
	var list api.PreviewLinkList
	if s, _ := api1.JSON(t, http.MethodGet, "/api/v1/sandboxes/"+sb.ID+"/previews", nil, &list); s != http.StatusOK || len(list.Links) != 1 || list.Links[0].Active {
		t.Errorf("Got(list after expiry) = %d %+v; want the link, inactive", s, list)
	}
}
