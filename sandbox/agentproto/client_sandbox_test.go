package agentproto_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agent"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// helloWith answers hello with the sandbox ops as capabilities.
func helloWith(st net.Conn) {
	agentproto.WriteMessage(st, agentproto.Response{V: 1, Hello: &agentproto.Hello{Protocol: 1,
		Capabilities: []string{"hello", "sandbox.create", "exec", "file.read", "file.write"}}})
}

func TestSandboxOpsNeedTheCapability(t *testing.T) {
	// The real agent without a sandbox manager does not offer them: the
	// client refuses without asking.
	c := dial(t, startAgent(t, agent.Config{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := map[string]error{}
	_, calls["create"] = c.CreateSandbox(ctx, agentproto.SandboxSpec{ID: "a", Template: "busybox"})
	_, calls["destroy"] = c.DestroySandbox(ctx, "a")
	_, calls["list"] = c.ListSandboxes(ctx)
	_, calls["stats"] = c.SandboxStats(ctx, "a")
	_, calls["exec"] = c.Exec(ctx, agentproto.ExecRequest{Sandbox: "a", Argv: []string{"true"}}, nil, nil, nil)
	_, calls["read"] = c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: "a", Path: "x"}, &bytes.Buffer{})
	_, calls["write"] = c.WriteFile(ctx, agentproto.FileWriteRequest{Sandbox: "a", Path: "x"}, bytes.NewReader(nil))
	_, calls["baseline"] = c.Baseline(ctx, agentproto.BaselineRequest{Kind: "run", Count: 1})
	for name, err := range calls {
		if !errors.Is(err, agentproto.ErrNotImplemented) {
			t.Errorf("Got(%s without the capability) = %v; want ErrNotImplemented", name, err)
		}
	}
}

// TestClientDistrustsTheGuest: whatever a hostile guest sends, the client
// bounds it and reports a protocol error.
func TestClientDistrustsTheGuest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("file longer than announced", func(t *testing.T) {
		conn, _ := fakeAgent(t, func(st net.Conn, req agentproto.Request) {
			if req.Op == agentproto.OpHello {
				helloWith(st)
				return
			}
			agentproto.WriteMessage(st, agentproto.Response{V: 1, File: &agentproto.FileInfo{Size: 4}})
			agentproto.WriteFrame(st, agentproto.ChannelData, []byte("1234"))
			agentproto.WriteFrame(st, agentproto.ChannelData, []byte("5678"))
			agentproto.WriteFrame(st, agentproto.ChannelData, nil)
		})
		c := dial(t, conn)
		var got bytes.Buffer
		_, err := c.ReadFile(ctx, agentproto.FileReadRequest{Sandbox: "a", Path: "x"}, &got)
		if !errors.Is(err, agentproto.ErrProtocol) || got.Len() > 4 {
			t.Errorf("Got(ReadFile() of a lying guest) = %q, %v; want ErrProtocol and at most 4 bytes", got.String(), err)
		}
	})

	t.Run("exec frame on an unknown channel", func(t *testing.T) {
		conn, _ := fakeAgent(t, func(st net.Conn, req agentproto.Request) {
			if req.Op == agentproto.OpHello {
				helloWith(st)
				return
			}
			agentproto.WriteMessage(st, agentproto.Response{V: 1, Exec: &agentproto.ExecStarted{PID: 7}})
			agentproto.WriteFrame(st, agentproto.ChannelStdout, []byte("out"))
			agentproto.WriteFrame(st, 99, []byte("??"))
		})
		c := dial(t, conn)
		var out bytes.Buffer
		_, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: "a", Argv: []string{"x"}}, nil, &out, nil)
		if !errors.Is(err, agentproto.ErrProtocol) || out.String() != "out" {
			t.Errorf("Got(Exec() with a bad frame) = %q, %v; want ErrProtocol after the output", out.String(), err)
		}
	})

	t.Run("exec exit status", func(t *testing.T) {
		conn, _ := fakeAgent(t, func(st net.Conn, req agentproto.Request) {
			if req.Op == agentproto.OpHello {
				helloWith(st)
				return
			}
			agentproto.WriteMessage(st, agentproto.Response{V: 1, Exec: &agentproto.ExecStarted{PID: 7}})
			// Echo stdin back, then exit once stdin closes.
			for {
				f, err := agentproto.ReadFrame(st)
				if err != nil {
					return
				}
				if len(f.Data) == 0 {
					break
				}
				agentproto.WriteFrame(st, agentproto.ChannelStderr, f.Data)
			}
			b, _ := json.Marshal(agentproto.ExitStatus{Code: 3, Reason: agentproto.ReasonExited})
			agentproto.WriteFrame(st, agentproto.ChannelExit, b)
		})
		c := dial(t, conn)
		var errOut bytes.Buffer
		st, err := c.Exec(ctx, agentproto.ExecRequest{Sandbox: "a", Argv: []string{"x"}},
			bytes.NewReader(bytes.Repeat([]byte("z"), 100_000)), nil, &errOut)
		if err != nil || st.Code != 3 || errOut.Len() != 100_000 {
			t.Errorf("Got(Exec()) = %+v, %d bytes, %v; want exit 3 after 100000 bytes echoed", st, errOut.Len(), err)
		}
	})

	t.Run("write answered early", func(t *testing.T) {
		conn, _ := fakeAgent(t, func(st net.Conn, req agentproto.Request) {
			if req.Op == agentproto.OpHello {
				helloWith(st)
				return
			}
			agentproto.WriteMessage(st, agentproto.Response{V: 1})
			agentproto.ReadFrame(st)
			agentproto.WriteMessage(st, agentproto.Response{V: 1, Error: &agentproto.Error{Code: agentproto.CodeExhausted, Message: "disk full"}})
		})
		c := dial(t, conn)
		// More than the stream window: the client must stop sending.
		_, err := c.WriteFile(ctx, agentproto.FileWriteRequest{Sandbox: "a", Path: "x"}, bytes.NewReader(make([]byte, 8<<20)))
		if !errors.Is(err, agentproto.ErrExhausted) {
			t.Errorf("Got(WriteFile() into a full disk) = %v; want ErrExhausted", err)
		}
	})
}
