package agentproto_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

func TestMessageRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := agentproto.Request{V: 1, Op: agentproto.OpExec, Exec: &agentproto.ExecRequest{Sandbox: "s1", Argv: []string{"echo", "hi"}}}
	if err := agentproto.WriteMessage(&buf, in); err != nil {
		t.Fatalf("WriteMessage() = %v", err)
	}
	var out agentproto.Request
	if err := agentproto.ReadMessage(&buf, &out); err != nil {
		t.Fatalf("ReadMessage() = %v", err)
	}
	if out.Op != in.Op || out.Exec == nil || out.Exec.Sandbox != "s1" || len(out.Exec.Argv) != 2 {
		t.Errorf("Got(round trip) = %+v; want %+v", out, in)
	}
}

func lengthPrefix(n uint32, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, n)
	return append(b, body...)
}

func TestReadMessageBounds(t *testing.T) {
	tests := []struct {
		name  string
		input []byte
		want  error
	}{
		{"over the bound", lengthPrefix(agentproto.MaxMessageSize+1, nil), agentproto.ErrTooLarge},
		{"huge", lengthPrefix(0xffffffff, nil), agentproto.ErrTooLarge},
		{"empty", lengthPrefix(0, nil), agentproto.ErrEmptyMessage},
		{"truncated body", lengthPrefix(10, []byte(`{"v":`)), io.ErrUnexpectedEOF},
		{"truncated length", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"nothing", nil, io.EOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req agentproto.Request
			err := agentproto.ReadMessage(bytes.NewReader(tc.input), &req)
			if !errors.Is(err, tc.want) {
				t.Errorf("Got(ReadMessage()) = %v; want %v", err, tc.want)
			}
		})
	}
}

func TestWriteMessageBound(t *testing.T) {
	big := agentproto.ExecRequest{Argv: []string{string(bytes.Repeat([]byte("a"), agentproto.MaxMessageSize))}}
	var buf bytes.Buffer
	err := agentproto.WriteMessage(&buf, agentproto.Request{V: 1, Op: agentproto.OpExec, Exec: &big})
	if !errors.Is(err, agentproto.ErrTooLarge) {
		t.Errorf("Got(WriteMessage(oversized)) = %v; want ErrTooLarge", err)
	}
	if buf.Len() != 0 {
		t.Errorf("Got(bytes written) = %d; want 0", buf.Len())
	}
}

func TestFrames(t *testing.T) {
	var buf bytes.Buffer
	frames := []agentproto.Frame{
		{Channel: agentproto.ChannelStdout, Data: []byte("hello\n")},
		{Channel: agentproto.ChannelStdin, Data: []byte{}},
		{Channel: agentproto.ChannelExit, Data: []byte(`{"code":3}`)},
	}
	for _, f := range frames {
		if err := agentproto.WriteFrame(&buf, f.Channel, f.Data); err != nil {
			t.Fatalf("WriteFrame() = %v", err)
		}
	}
	for i, want := range frames {
		got, err := agentproto.ReadFrame(&buf)
		if err != nil {
			t.Fatalf("ReadFrame() #%d = %v", i, err)
		}
		if got.Channel != want.Channel || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("Got(ReadFrame() #%d) = %d %q; want %d %q", i, got.Channel, got.Data, want.Channel, want.Data)
		}
	}
	if _, err := agentproto.ReadFrame(&buf); !errors.Is(err, io.EOF) {
		t.Errorf("Got(ReadFrame() at end) = %v; want io.EOF", err)
	}
}

func TestFrameBounds(t *testing.T) {
	var buf bytes.Buffer
	if err := agentproto.WriteFrame(&buf, agentproto.ChannelData, make([]byte, agentproto.MaxFrameSize+1)); !errors.Is(err, agentproto.ErrTooLarge) {
		t.Errorf("Got(WriteFrame(oversized)) = %v; want ErrTooLarge", err)
	}
	hdr := []byte{byte(agentproto.ChannelStdout)}
	hdr = binary.BigEndian.AppendUint32(hdr, agentproto.MaxFrameSize+1)
	if _, err := agentproto.ReadFrame(bytes.NewReader(hdr)); !errors.Is(err, agentproto.ErrTooLarge) {
		t.Errorf("Got(ReadFrame(oversized header)) = %v; want ErrTooLarge", err)
	}
	// Exactly at the bound is fine.
	if err := agentproto.WriteFrame(&buf, agentproto.ChannelData, make([]byte, agentproto.MaxFrameSize)); err != nil {
		t.Errorf("Got(WriteFrame(at bound)) = %v; want nil", err)
	}
}

func TestRemoteErrorIs(t *testing.T) {
	tests := []struct {
		code string
		want error
	}{
		{agentproto.CodeUnknownOp, agentproto.ErrUnknownOp},
		{agentproto.CodeUnsupportedVersion, agentproto.ErrUnsupportedVersion},
		{agentproto.CodeBadRequest, agentproto.ErrBadRequest},
		{agentproto.CodeNotImplemented, agentproto.ErrNotImplemented},
		{agentproto.CodeInternal, agentproto.ErrRemote},
		{"something new", agentproto.ErrRemote},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			err := fmt.Errorf("wrapped: %w", &agentproto.RemoteError{Op: agentproto.OpPing, Err: agentproto.Error{Code: tc.code}})
			if !errors.Is(err, tc.want) {
				t.Errorf("Got(errors.Is(%s, %v)) = false; want true", tc.code, tc.want)
			}
			if tc.want != agentproto.ErrUnknownOp && errors.Is(err, agentproto.ErrUnknownOp) {
				t.Errorf("Got(errors.Is(%s, ErrUnknownOp)) = true; want false", tc.code)
			}
		})
	}
}
