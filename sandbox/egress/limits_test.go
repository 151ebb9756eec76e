package egress_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// TestGatewayRateLimitsEvents: one sandbox writes at most EventsPerWindow
// rows a window. Past that its connections are still served and metered,
// and its next row counts them; the ledger holds every byte.
func TestGatewayRateLimitsEvents(t *testing.T) {
	ctx := context.Background()
	db := dbtest.SQLite(t)
	tn := newTenantIn(t, db, "limits")
	store := egress.NewStore(db)
	clock := clockwork.NewFakeClockAt(time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC))
	pol := &policyBox{}
	pol.set(egress.Rules{Default: egress.DefaultAllow})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	gw, err := egress.New(egress.Config{Policies: pol, Store: store, Clock: clock, Logger: slog.New(slog.DiscardHandler),
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, EventsPerWindow: 3, EventWindow: time.Minute,
		Resolver: names{"allowed.test": {netip.MustParseAddr("127.0.0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	proxy := &url.URL{Scheme: "http", Host: serveGateway(t, gw, tn, "sb-1")}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	get := func() {
		t.Helper()
		resp, err := client.Get("http://allowed.test:" + portOf(up) + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("Got(GET) = %d; want 200 whatever the event limit", resp.StatusCode)
		}
	}
	// Each connection is recorded when it ends, just after its answer:
	// wait for the ledger to hold what the live counter does before the
	// next.
	waitLedger := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			wantUp, wantDown := gw.Bytes("sb-1")
			u, d := ledgerEgress(t, db, tn, "sb-1")
			if u == wantUp && d == wantDown {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Got(ledger egress) = %d, %d; want %d, %d (every connection metered)", u, d, wantUp, wantDown)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := 0; i < 5; i++ {
		get()
		waitLedger()
	}
	evs, err := store.Events(ctx, tn, egress.Filter{})
	if err != nil || len(evs) != 3 {
		t.Fatalf("Got(%d rows after 5 connections) = %v; want 3", len(evs), err)
	}
	clock.Advance(time.Minute)
	get()
	waitLedger()
	evs, err = store.Events(ctx, tn, egress.Filter{})
	if err != nil || len(evs) != 4 || evs[0].Suppressed != 2 {
		t.Fatalf("Got(%d rows, newest %+v) = %v; want 4, the newest counting 2 suppressed", len(evs), evs, err)
	}
	var rowBytes int64
	for _, e := range evs {
		rowBytes += e.BytesUp + e.BytesDown
	}
	if u, d := ledgerEgress(t, db, tn, "sb-1"); u+d <= rowBytes {
		t.Errorf("Got(ledger %d bytes, rows %d); want the ledger to hold the suppressed connections' bytes too", u+d, rowBytes)
	}
}

// TestGatewayBoundsEventText: what a sandbox writes into its proxy request
// (a 60 KiB request line, a 60 KiB host) reaches the event row bounded.
func TestGatewayBoundsEventText(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	f.policy.set(egress.Rules{Default: egress.DefaultDeny})
	long := strings.Repeat("a", 60<<10)
	tests := []struct{ name, raw string }{
		{"request line quoted in the error", "X" + long + "\r\n\r\n"},
		{"host", fmt.Sprintf("CONNECT %s.example:443 HTTP/1.1\r\nHost: x\r\n\r\n", long)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, _ := f.raw(t, tc.raw); code/100 != 4 {
				t.Errorf("Got(status) = %d; want a refusal", code)
			}
			ev := f.waitEvents(t)[0]
			if len(ev.Error) > 512 || len(ev.Host) > 255 || len(ev.Method) > 32 {
				t.Errorf("Got(event) error %d, host %d, method %d bytes; want at most 512, 255, 32", len(ev.Error), len(ev.Host), len(ev.Method))
			}
		})
	}
}
