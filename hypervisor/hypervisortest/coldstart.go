package hypervisortest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
)

// ColdStart boots spec on h, waits for the guest's first line on its
// channel (the busybox guest's READY) and destroys the VM again. It returns
// the time from Create to that line: the baseline cold start that `make
// bench` compares the real guest image against.
func ColdStart(ctx context.Context, h *hypervisor.Host, spec hypervisor.DomainSpec) (d time.Duration, line string, err error) {
	start := time.Now()
	if _, err := h.Create(ctx, spec); err != nil {
		return 0, "", fmt.Errorf("cold start: %w", err)
	}
	defer func() {
		// A leftover VM is destroyed by Connect's cleanup; report it here too.
		if derr := h.Destroy(context.Background(), spec.ID); derr != nil && !errors.Is(derr, hypervisor.ErrNotFound) && err == nil {
			err = fmt.Errorf("cold start: %w", derr)
		}
	}()
	ch, err := h.OpenChannel(ctx, spec.ID, spec.ChannelName)
	if err != nil {
		return 0, "", fmt.Errorf("cold start: %w", err)
	}
	defer ch.Close()
	type result struct {
		line string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(ch).ReadString('\n')
		got <- result{strings.TrimRight(line, "\r\n"), err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			return 0, "", fmt.Errorf("cold start: read first line: %w", r.err)
		}
		return time.Since(start), r.line, nil
	case <-ctx.Done():
		ch.Close()
		return 0, "", fmt.Errorf("cold start: %w", ctx.Err())
	}
}
