package agentproto_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

func TestBaselineLoopBounds(t *testing.T) {
	loop := func(c int, d time.Duration) agentproto.BaselineRequest {
		return agentproto.BaselineRequest{Kind: agentproto.BaselineLoop, Concurrency: c, Duration: d}
	}
	reqs := []struct {
		req agentproto.BaselineRequest
		ok  bool
	}{
		{loop(1, time.Second), true},
		{loop(agentproto.MaxLoopConcurrency, agentproto.MaxLoopDuration), true},
		{loop(0, time.Second), false},
		{loop(agentproto.MaxLoopConcurrency+1, time.Second), false},
		{loop(1, 0), false},
		{loop(1, -time.Second), false},
		{loop(1, agentproto.MaxLoopDuration+1), false},
	}
	for _, tt := range reqs {
		err := tt.req.CheckLoop()
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, agentproto.ErrBadRequest)) {
			t.Errorf("Got(CheckLoop(c %d, %v)) = %v; want ok %v (else ErrBadRequest)", tt.req.Concurrency, tt.req.Duration, err, tt.ok)
		}
	}
	// What a guest answers is bounded too.
	req := loop(8, 10*time.Second)
	answers := []struct {
		res *agentproto.LoopResult
		ok  bool
	}{
		{&agentproto.LoopResult{Tasks: 40, Elapsed: 11 * time.Second}, true},
		{&agentproto.LoopResult{Tasks: 0, Elapsed: 10 * time.Second}, true},
		{nil, false},
		{&agentproto.LoopResult{Tasks: -1, Elapsed: 11 * time.Second}, false},
		{&agentproto.LoopResult{Tasks: 40, Elapsed: 9 * time.Second}, false},
		{&agentproto.LoopResult{Tasks: 40, Elapsed: 10*time.Second + agentproto.MaxLoopDuration + 1}, false},
	}
	for _, tt := range answers {
		err := tt.res.Check(req)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, agentproto.ErrProtocol)) {
			t.Errorf("Got(Check(%+v)) = %v; want ok %v (else ErrProtocol)", tt.res, err, tt.ok)
		}
	}
}

func TestRunLoop(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[[2]int]bool{}
	res, err := agentproto.RunLoop(ctx, 3, time.Nanosecond, func(_ context.Context, w, i int) error {
		mu.Lock()
		defer mu.Unlock()
		seen[[2]int{w, i}] = true
		return nil
	})
	if err != nil || res.Tasks != 3 || len(seen) != 3 || !seen[[2]int{0, 0}] || !seen[[2]int{2, 0}] || res.Elapsed < time.Nanosecond {
		t.Errorf("Got(RunLoop past its deadline) = %+v, %v, tasks %v; want one task per worker", res, err, seen)
	}
	res, err = agentproto.RunLoop(ctx, 2, 30*time.Millisecond, func(context.Context, int, int) error {
		time.Sleep(time.Millisecond)
		return nil
	})
	if err != nil || res.Tasks < 4 || res.Elapsed < 30*time.Millisecond {
		t.Errorf("Got(RunLoop for 30 ms of 1 ms tasks) = %+v, %v; want several tasks, elapsed at least the duration", res, err)
	}
	boom := errors.New("boom")
	res, err = agentproto.RunLoop(ctx, 4, time.Hour, func(ctx context.Context, w, i int) error {
		if w == 1 && i == 2 {
			return boom
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
			return nil
		}
	})
	if !errors.Is(err, boom) {
		t.Errorf("Got(RunLoop with a failing task) = %+v, %v; want the task's error, the others stopped", res, err)
	}
}
