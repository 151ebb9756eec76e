package reaper

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestReaperRun(t *testing.T) {
	r := New(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Loop(ctx)

	tests := []struct {
		name    string
		path    string
		args    []string
		want    string
		wantErr bool
	}{
		{"stdout", "/bin/sh", []string{"-c", "echo hi; echo there"}, "hi\nthere\n", false},
		{"exit status", "/bin/sh", []string{"-c", "echo partial; exit 3"}, "partial\n", true},
		{"missing", "/nonexistent", nil, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := r.Run(ctx, tc.path, tc.args...)
			if (err != nil) != tc.wantErr {
				t.Errorf("Got(Run() error) = %v; want error %v", err, tc.wantErr)
			}
			if string(out) != tc.want {
				t.Errorf("Got(Run() output) = %q; want %q", out, tc.want)
			}
		})
	}

	t.Run("context ends a hung child", func(t *testing.T) {
		cctx, ccancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer ccancel()
		start := time.Now()
		_, err := r.Run(cctx, "/bin/sleep", "30")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Got(Run(sleep) error) = %v; want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("Got(Run(sleep) duration) = %v; want bounded by the context", d)
		}
	})

	t.Run("many concurrent", func(t *testing.T) {
		errs := make(chan error, 20)
		for i := range 20 {
			go func() {
				out, err := r.Run(ctx, "/bin/echo", strings.Repeat("x", i))
				if err == nil && !bytes.Equal(out, []byte(strings.Repeat("x", i)+"\n")) {
					err = errors.New("wrong output " + string(out))
				}
				errs <- err
			}()
		}
		for range 20 {
			if err := <-errs; err != nil {
				t.Errorf("Got(concurrent Run()) = %v; want nil", err)
			}
		}
	})
}
