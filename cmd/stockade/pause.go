package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
)

// sandboxPause is `stockade sandbox pause ID...` and `... resume ID...`:
// POST /api/v1/sandboxes/:id/pause (resume) for each, printing each id done.
func sandboxPause(ctx context.Context, c *apiClient, verb string, ids []string, stdout, stderr io.Writer) error {
	if len(ids) == 0 {
		fmt.Fprintf(stderr, "usage: stockade sandbox %s ID...\n", verb)
		return exitError(2)
	}
	var errs []error
	for _, id := range ids {
		if err := c.json(ctx, "POST", "/api/v1/sandboxes/"+url.PathEscape(id)+"/"+verb, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", verb, id, err))
			continue
		}
		fmt.Fprintln(stdout, id)
	}
	return errors.Join(errs...)
}
