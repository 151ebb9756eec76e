package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/stockade-dev/stockade/handlers/api"
)

const usageHelp = `usage:
  stockade usage export [--from DATE|TIME] [--to DATE|TIME] [--format csv|json] [--output FILE]
  stockade usage summary [--from DATE|TIME] [--to DATE|TIME] [--json]

DATE is YYYY-MM-DD (UTC; --to includes that whole day), TIME is RFC 3339.
Without --from and --to: this month. The export needs a billing or admin token.
`

// usageCmd is the API client for the tenant's usage: export, summary.
func usageCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageHelp)
		return exitError(2)
	}
	switch args[0] {
	case "export":
		return usageExport(ctx, args[1:], getenv, stdout, stderr)
	case "summary":
		return usageSummary(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageHelp)
		return nil
	}
	fmt.Fprintf(stderr, "stockade usage: unknown command %q\n\n%s", args[0], usageHelp)
	return exitError(2)
}

// periodFlags are --from and --to, passed to the API as they are (the
// server parses and names what is wrong).
func periodFlags(fs *flag.FlagSet) func() url.Values {
	from := fs.String("from", "", "start: YYYY-MM-DD or RFC 3339 (default: this month)")
	to := fs.String("to", "", "end: YYYY-MM-DD (inclusive) or RFC 3339")
	return func() url.Values {
		q := url.Values{}
		if *from != "" {
			q.Set("from", *from)
		}
		if *to != "" {
			q.Set("to", *to)
		}
		return q
	}
}

// usageExport streams GET /api/v1/usage to stdout or a file. A file is
// written under a temporary name and renamed once complete, so a failed
// export never leaves a truncated file behind.
func usageExport(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("usage export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	period := periodFlags(fs)
	format := fs.String("format", "csv", "csv or json")
	output := fs.String("output", "", "write to FILE instead of stdout")
	c, err := usageClient(fs, args, getenv, stderr)
	if err != nil {
		return err
	}
	q := period()
	q.Set("format", *format)
	resp, err := c.do(ctx, "GET", "/api/v1/usage?"+q.Encode(), nil, "")
	if err != nil {
		return fmt.Errorf("usage export: %w", err)
	}
	defer resp.Body.Close()
	if *output == "" {
		if _, err := io.Copy(stdout, resp.Body); err != nil {
			return fmt.Errorf("usage export: %w", err)
		}
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(*output), "."+filepath.Base(*output)+".*")
	if err != nil {
		return fmt.Errorf("usage export: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	n, err := io.Copy(f, resp.Body)
	if err != nil {
		return fmt.Errorf("usage export: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("usage export: %w", err)
	}
	if err = os.Rename(f.Name(), *output); err != nil {
		return fmt.Errorf("usage export: %w", err)
	}
	fmt.Fprintf(stderr, "wrote %d bytes to %s\n", n, *output)
	return nil
}

// usageSummary prints GET /api/v1/usage/summary: totals and the top lists
// (the JSON as it is with --json).
func usageSummary(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("usage summary", flag.ContinueOnError)
	fs.SetOutput(stderr)
	period := periodFlags(fs)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	c, err := usageClient(fs, args, getenv, stderr)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := c.json(ctx, "GET", "/api/v1/usage/summary?"+period().Encode(), nil, &raw); err != nil {
		return fmt.Errorf("usage summary: %w", err)
	}
	if *asJSON {
		return writeIndented(stdout, raw)
	}
	var s api.UsageSummary
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("usage summary: decode the answer: %w", err)
	}
	t := s.Totals
	fmt.Fprintf(stdout, "Usage of %s from %s to %s\n", s.Tenant, s.From, s.To)
	fmt.Fprintf(stdout, "  cost            %.4f %s\n", cost(t.Cost), t.Currency)
	fmt.Fprintf(stdout, "  vCPU-hours      %.2f\n", t.VCPUSeconds/3600)
	fmt.Fprintf(stdout, "  GiB-hours       %.2f\n", t.GiBSeconds/3600)
	fmt.Fprintf(stdout, "  CPU-hours       %.2f (measured)\n", t.CPUSeconds/3600)
	fmt.Fprintf(stdout, "  egress          %d bytes\n", t.EgressBytes)
	fmt.Fprintf(stdout, "  sandboxes       %d\n", s.Sandboxes)
	var errs []error
	for _, g := range []struct {
		key, title string
		lines      []api.UsageLine
	}{{"sandboxes", "SANDBOX", s.Top.Sandboxes}, {"users", "USER", s.Top.Users}, {"templates", "TEMPLATE", s.Top.Templates}} {
		lines := g.lines
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintln(stdout)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tCOST\tVCPU-H\tCPU-H\tEGRESS BYTES\n", g.title)
		for _, l := range lines {
			name := l.Label
			if g.key == "sandboxes" {
				name = l.Key
			}
			fmt.Fprintf(tw, "%s\t%.4f %s\t%.2f\t%.2f\t%d\n", name, cost(l.Cost), l.Currency, l.VCPUSeconds/3600, l.CPUSeconds/3600, l.EgressBytes)
		}
		errs = append(errs, tw.Flush())
	}
	return errors.Join(errs...)
}

// cost is an exact decimal of the API as a float, for printing.
func cost(n json.Number) float64 {
	f, _ := n.Float64()
	return f
}

// usageClient parses a usage command's flags (it takes no arguments) and
// makes the API client.
func usageClient(fs *flag.FlagSet, args []string, getenv func(string) string, stderr io.Writer) (*apiClient, error) {
	if err := fs.Parse(args); err != nil {
		return nil, exitError(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprint(stderr, usageHelp)
		return nil, exitError(2)
	}
	return newAPIClient(getenv)
}
