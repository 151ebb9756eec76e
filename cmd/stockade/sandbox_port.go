package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
)

// sandboxPort prints where a sandbox port is reached through the server:
// stockade sandbox port [--preview [--ttl 1h]] ID PORT. With --preview it
// makes a preview link (a URL that works without a token until it expires
// or is revoked) and prints it; the link is shown this once.
func sandboxPort(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox port", flag.ContinueOnError)
	fs.SetOutput(stderr)
	preview := fs.Bool("preview", false, "create a preview link (works without a token) and print it")
	ttl := fs.Duration("ttl", 0, "how long the preview link works (1m to 168h; default the server's, 1h)")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "usage: stockade sandbox port [--preview [--ttl 1h]] ID PORT")
		return exitError(2)
	}
	id := fs.Arg(0)
	port, err := strconv.Atoi(fs.Arg(1))
	if err != nil || port < 1 || port > 65535 {
		fmt.Fprintf(stderr, "stockade sandbox port: port %q: must be a TCP port, 1 to 65535\n", fs.Arg(1))
		return exitError(2)
	}
	if *ttl != 0 && !*preview {
		fmt.Fprintln(stderr, "stockade sandbox port: --ttl goes with --preview")
		return exitError(2)
	}
	base := "/api/v1/sandboxes/" + url.PathEscape(id)
	if !*preview {
		var out api.PortURL
		if err := c.json(ctx, "GET", base+"/ports/"+strconv.Itoa(port), nil, &out); err != nil {
			return err
		}
		fmt.Fprintln(stdout, out.URL)
		return nil
	}
	var out api.PreviewLink
	in := api.CreatePreviewLink{Port: port, TTLSeconds: int(ttl.Round(time.Second) / time.Second)}
	if err := c.json(ctx, "POST", base+"/previews", in, &out); err != nil {
		return err
	}
	fmt.Fprintln(stdout, out.URL)
	fmt.Fprintf(stderr, "preview link %s: port %d until %s (revoke: DELETE %s/previews/%s)\n", out.ID, port, out.ExpiresAt, base, out.ID)
	return nil
}
