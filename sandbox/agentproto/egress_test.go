package agentproto_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// TestEgressStream runs an agent-opened egress stream against a host
// handler that answers in upper case after the sandbox half-closed: the
// bytes cross both ways, in frames, and each end sees the other's close.
func TestEgressStream(t *testing.T) {
	conn, sess := fakeAgent(t, func(st net.Conn, req agentproto.Request) {
		agentproto.WriteMessage(st, agentproto.Response{V: 1, Hello: &agentproto.Hello{Protocol: 1}})
	})
	got := make(chan string, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agentproto.Dial(ctx, conn, agentproto.ClientOptions{Egress: func(ctx context.Context, sandboxID string, conn net.Conn) {
		defer conn.Close()
		got <- sandboxID
		b, err := io.ReadAll(conn)
		if err != nil {
			return
		}
		conn.Write(bytes.ToUpper(b))
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	big := strings.Repeat("payload ", 40000) // several frames
	ec, err := agentproto.OpenEgress(ctx, func() (net.Conn, error) { return sess.OpenStream() }, "sb-7")
	if err != nil {
		t.Fatalf("OpenEgress() = %v", err)
	}
	defer ec.Close()
	ec.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(ec, big); err != nil {
		t.Fatal(err)
	}
	if err := ec.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(ec)
	if err != nil {
		t.Fatalf("Got(ReadAll) error %v; want the answer and EOF", err)
	}
	if string(back) != strings.ToUpper(big) {
		t.Errorf("Got(answer) of %d bytes; want %d bytes in upper case", len(back), len(big))
	}
	if id := <-got; id != "sb-7" {
		t.Errorf("Got(sandbox id at the host) = %q; want sb-7", id)
	}
}

func TestEgressRefusals(t *testing.T) {
	tests := []struct {
		name    string
		handler bool
		sandbox string
		want    error
	}{
		{"no handler", false, "sb-1", agentproto.ErrNotImplemented},
		{"bad sandbox id", true, "../etc", agentproto.ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, sess := fakeAgent(t, func(st net.Conn, req agentproto.Request) {
				agentproto.WriteMessage(st, agentproto.Response{V: 1, Hello: &agentproto.Hello{Protocol: 1}})
			})
			var h agentproto.EgressHandler
			if tc.handler {
				h = func(ctx context.Context, sandboxID string, conn net.Conn) { conn.Close() }
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := agentproto.Dial(ctx, conn, agentproto.ClientOptions{Egress: h})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = agentproto.OpenEgress(ctx, func() (net.Conn, error) { return sess.OpenStream() }, tc.sandbox)
			if !errors.Is(err, tc.want) {
				t.Errorf("Got(OpenEgress()) = %v; want %v", err, tc.want)
			}
		})
	}
}
