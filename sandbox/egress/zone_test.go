package egress_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/egress"
)

// TestGatewayRefusesZonedLiterals: an IPv6 literal with a zone matches no
// blocked prefix, so before the fix a zoned loopback literal passed every
// block and the gateway dialled this host's own ::1. The upstream here
// listens on [::1]; the fixture allows 127.0.0.0/8 only (as the other
// tests do), so nothing may ever reach it: a raw CONNECT and an
// absolute-form GET with the zoned literal are both refused, by rule, and
// no connection arrives. So are the IPv6 forms embedding a loopback IPv4
// address. (A zone left unescaped in a URL is not a URL: 400.)
func TestGatewayRefusesZonedLiterals(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	f.policy.set(egress.Rules{Default: egress.DefaultAllow})
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("listen on [::1]: %v", err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				// Answer a plain request, as a local service would.
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nlocal service")
				}
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	tests := []struct {
		name, raw string
		want      int
	}{
		{"raw CONNECT", fmt.Sprintf("CONNECT [::1%%25lo]:%s HTTP/1.1\r\nHost: [::1%%25lo]:%s\r\n\r\n", port, port), http.StatusForbidden},
		{"raw CONNECT, zone unescaped", fmt.Sprintf("CONNECT [::1%%lo]:%s HTTP/1.1\r\nHost: [::1%%lo]:%s\r\n\r\n", port, port), http.StatusBadRequest},
		{"absolute-form GET", fmt.Sprintf("GET http://[::1%%25lo]:%s/ HTTP/1.1\r\nHost: [::1%%25lo]:%s\r\n\r\n", port, port), http.StatusForbidden},
		{"link-local zoned CONNECT", fmt.Sprintf("CONNECT [fe80::1%%25eth0]:%s HTTP/1.1\r\nHost: x\r\n\r\n", port), http.StatusForbidden},
		{"IPv4-compatible loopback", fmt.Sprintf("GET http://[::127.0.0.1]:%s/ HTTP/1.1\r\nHost: x\r\n\r\n", portOf(f.plain)), http.StatusForbidden},
		{"NAT64 loopback", fmt.Sprintf("GET http://[64:ff9b::7f00:1]:%s/ HTTP/1.1\r\nHost: x\r\n\r\n", portOf(f.plain)), http.StatusForbidden},
		{"6to4 loopback", fmt.Sprintf("GET http://[2002:7f00:1::1]:%s/ HTTP/1.1\r\nHost: x\r\n\r\n", portOf(f.plain)), http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.raw(t, tc.raw)
			if code != tc.want || (tc.want == http.StatusForbidden && !strings.Contains(body, "blocked")) {
				t.Errorf("Got(%s) = %d %q; want %d blocked", tc.name, code, body, tc.want)
			}
			evs := f.waitEvents(t)
			if evs[0].Decision != egress.DecisionDeny || evs[0].Addr != "" ||
				(tc.want == http.StatusForbidden && !strings.HasPrefix(evs[0].Rule, "blocked: ")) {
				t.Errorf("Got(event) = %+v; want a blocked denial with no address dialled", evs[0])
			}
		})
	}
	select {
	case <-accepted:
		t.Error("Got(a connection on [::1]); want none: the zoned literal reached this host's loopback")
	default:
	}
}
