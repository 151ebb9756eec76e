package egress_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// TestGatewayAuditsDenials: every refused connection is in egress_events,
// and the audit log gets egress.denied (outcome denied) at most once per
// sandbox and host per window, the next one counting those folded in; an
// allowed connection is not audited.
func TestGatewayAuditsDenials(t *testing.T) {
	ctx := context.Background()
	db := dbtest.SQLite(t)
	ten, err := tenants.NewStore(db, nil).CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "acme", "Acme")
	if err != nil {
		t.Fatal(err)
	}
	clock := clockwork.NewFakeClockAt(time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC))
	log := audit.NewLog(db, clock.Now)
	store := egress.NewStore(db)
	pol := &policyBox{}
	pol.set(egress.Rules{Default: egress.DefaultDeny, Allow: []egress.Rule{{Domain: "allowed.test"}}})
	lo := netip.MustParseAddr("127.0.0.1")
	gw, err := egress.New(egress.Config{Policies: pol, Store: store, Audit: log, Clock: clock, Logger: slog.New(slog.DiscardHandler),
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, DenialAuditWindow: time.Minute,
		Resolver: names{"allowed.test": {lo}, "denied.test": {lo}, "other-denied.test": {lo}}})
	if err != nil {
		t.Fatal(err)
	}
	upstream := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go upstream.Serve(uln)
	t.Cleanup(func() { upstream.Close() })
	_, port, _ := net.SplitHostPort(uln.Addr().String())
	proxy := serveGateway(t, gw, ten.ID, "sb-1")
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}), DisableKeepAlives: true},
		Timeout: 10 * time.Second}
	get := func(host string) int {
		t.Helper()
		resp, err := client.Get("http://" + host + ":" + port + "/")
		if err != nil {
			t.Fatalf("GET %s: %v", host, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	sent := 0
	denials := func(want int) []audit.Event {
		t.Helper()
		// The egress event and then the audit event are written after the
		// response: wait for both (a second at most).
		var evs []audit.Event
		for range 50 {
			evs, err = log.List(ctx, ten.ID, audit.Filter{Type: audit.TypeEgressDenied})
			if err != nil {
				t.Fatal(err)
			}
			n, _ := store.Events(ctx, ten.ID, egress.Filter{})
			if len(n) >= sent && len(evs) >= want {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return evs
	}

	steps := []struct {
		name        string
		host        string
		times       int
		advance     time.Duration
		wantStatus  int
		wantAudited int // egress.denied events in total afterwards
	}{
		{"first denial is audited", "denied.test", 1, 0, 403, 1},
		{"a loop within the window is not", "denied.test", 5, 0, 403, 1},
		{"another host has its own window", "other-denied.test", 2, 0, 403, 2},
		{"allowed connections are not audited", "allowed.test", 3, 0, 200, 2},
		{"after the window the next denial is audited", "denied.test", 1, time.Minute, 403, 3},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		for range st.times {
			if got := get(st.host); got != st.wantStatus {
				t.Fatalf("%s: Got(GET %s) = %d; want %d", st.name, st.host, got, st.wantStatus)
			}
			sent++
		}
		if evs := denials(st.wantAudited); len(evs) != st.wantAudited {
			t.Fatalf("%s: Got(egress.denied events) = %d; want %d", st.name, len(evs), st.wantAudited)
		}
	}
	evs := denials(3)
	last := evs[0] // newest first
	if last.Outcome != audit.OutcomeDenied || last.Code != "SE1200W" || last.TargetID != "sb-1" || last.Details["host"] != "denied.test" {
		t.Errorf("Got(last egress.denied) = %+v; want outcome denied, SE1200W, sandbox sb-1, host denied.test", last)
	}
	if got := last.Details["suppressed"]; got != float64(5) {
		t.Errorf("Got(suppressed) = %v; want 5 (the loop folded in)", got)
	}
	if last.Details["egress_event"] == "" || last.Details["egress_event"] == nil {
		t.Errorf("Got(egress_event) = %v; want the id of the stored decision", last.Details["egress_event"])
	}
	all, _ := store.Events(ctx, ten.ID, egress.Filter{})
	if len(all) != sent {
		t.Errorf("Got(egress_events) = %d; want %d: every decision is stored", len(all), sent)
	}
}
