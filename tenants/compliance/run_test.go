package compliance

import (
	"context"
	"testing"
	"time"
)

// TestRunTermByTerm: a replica runs the cycle for each leader term: Run
// returns when its term's context ends, runs again for the next term, and
// Close ends a term under way.
func TestRunTermByTerm(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		term := func(ctx context.Context) <-chan struct{} {
			done := make(chan struct{})
			go func() {
				defer close(done)
				e.svc.Run(ctx)
			}()
			return done
		}
		ended := func(what string, done <-chan struct{}) {
			t.Helper()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatalf("Got(Run) still running a minute after %s; want it returned", what)
			}
		}
		for i := range 2 {
			ctx, cancel := context.WithCancel(context.Background())
			done := term(ctx)
			e.clock.BlockUntilContext(ctx, 1) // the cycle waits for its next tick
			select {
			case <-done:
				t.Fatalf("Got(Run, term %d) returned while its term lasts; want it running", i)
			default:
			}
			cancel()
			ended("its term ended", done)
		}
		done := term(context.Background())
		e.clock.BlockUntilContext(context.Background(), 1)
		e.svc.Close()
		ended("Close", done)
	})
}
