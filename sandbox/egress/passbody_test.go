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

// rawUpstream answers every connection with reply, then holds it open
// until the test ends (an upstream that ignores Connection: close).
func rawUpstream(t *testing.T, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(c, reply)
				if strings.HasSuffix(reply, "HOLD") {
					<-done
				}
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestGatewayPlainBodyFraming: a plain request's response body goes to the
// sandbox as the upstream sent it (straight from the socket), bounded by
// its Content-Length exactly as a parsed response would be: bytes past it
// never reach the sandbox, an upstream that keeps its connection open does
// not hold the sandbox's, one that stops short is recorded as cut, and the
// upstream's hop-by-hop headers are not forwarded.
func TestGatewayPlainBodyFraming(t *testing.T) {
	tests := []struct {
		name     string
		reply    string
		wantBody string
		wantErr  bool
	}{
		{"exact, then held open", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=99\r\nX-Hop: 1\r\nX-Kept: yes\r\n\r\nhelloSMUGGLED HTTP/1.1 200 OK\r\n\r\nHOLD",
			"hello", false},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 50\r\nX-Kept: yes\r\n\r\nonly this", "only this", true},
		{"large body", "HTTP/1.1 201 Created\r\nContent-Length: 200000\r\nX-Kept: yes\r\n\r\n" + strings.Repeat("b", 200000) + "HOLD",
			strings.Repeat("b", 200000), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "127.0.0.0/8")
			f.policy.set(egress.Rules{Default: egress.DefaultAllow})
			port := rawUpstream(t, tc.reply)
			c, err := net.Dial("tcp", f.proxy.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "GET http://allowed.test:%s/x HTTP/1.1\r\nHost: allowed.test:%s\r\n\r\n", port, port)
			// The gateway closes the sandbox's connection after the body:
			// ReadAll ends even though the upstream holds its own open.
			all, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("Got(read to the gateway's close) error %v after %q", err, all)
			}
			head, body, ok := strings.Cut(string(all), "\r\n\r\n")
			if !ok {
				t.Fatalf("Got(answer) = %q; want a head and a body", all)
			}
			if body != tc.wantBody {
				t.Errorf("Got(body) = %.60q (%d bytes); want %.60q (%d bytes)", body, len(body), tc.wantBody, len(tc.wantBody))
			}
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(head+"\r\n\r\n")), nil)
			if err != nil {
				t.Fatalf("Got(head) = %q: %v", head, err)
			}
			if resp.Header.Get("X-Kept") != "yes" || resp.Header.Get("Keep-Alive") != "" || !resp.Close {
				t.Errorf("Got(head) = %q; want X-Kept, Connection: close, no Keep-Alive", head)
			}
			evs := f.waitEvents(t)
			ev := evs[0]
			if ev.Status != resp.StatusCode || (ev.Error != "") != tc.wantErr || ev.BytesDown != int64(len(all)) {
				t.Errorf("Got(event) = status %d, error %q, %d bytes down; want status %d, an error %v, the %d bytes sent",
					ev.Status, ev.Error, ev.BytesDown, resp.StatusCode, tc.wantErr, len(all))
			}
		})
	}
}
