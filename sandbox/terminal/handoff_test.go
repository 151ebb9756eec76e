package terminal

import (
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
)

// The handoff passes each write, in order, to the taker; a write made
// before there is one waits for it; push returns at the end of output.
func TestOutputHandoff(t *testing.T) {
	o := newOutputHandoff()
	writes := []string{"early", "prompt$ ", "x"}
	wrote := make(chan error, 1)
	go func() {
		for _, w := range writes {
			if _, err := o.Write([]byte(w)); err != nil {
				wrote <- err
				return
			}
		}
		close(o.ended)
		wrote <- nil
	}()
	var mu sync.Mutex
	var got []string
	o.push(func(p []byte) {
		mu.Lock()
		got = append(got, string(p))
		mu.Unlock()
	})
	if err := <-wrote; err != nil {
		t.Fatalf("Got(Write) = %v; want nil", err)
	}
	if !slices.Equal(got, writes) {
		t.Errorf("Got(taken) = %q; want %q", got, writes)
	}
}

// A write waiting for a taker fails once the handoff is closed (nobody
// will take it), instead of hanging the agent connection's reader.
func TestOutputHandoffClosed(t *testing.T) {
	o := newOutputHandoff()
	wrote := make(chan error, 1)
	go func() {
		_, err := o.Write([]byte("lost"))
		wrote <- err
	}()
	o.close()
	if err := <-wrote; !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Got(Write after close) = %v; want io.ErrClosedPipe", err)
	}
}

// A caller that reads an agentPTY instead of pushing gets the same bytes,
// then EOF.
func TestAgentPTYRead(t *testing.T) {
	o := newOutputHandoff()
	p := &agentPTY{out: o}
	go func() {
		o.Write([]byte("hello "))
		o.Write([]byte("world"))
		close(o.ended)
	}()
	b, err := io.ReadAll(p)
	if err != nil || string(b) != "hello world" {
		t.Errorf("Got(ReadAll) = %q, %v; want \"hello world\", nil", b, err)
	}
}
