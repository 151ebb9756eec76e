package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// workflowCmd is the API client for workflows: ls, show, apply, rm, run.
func workflowCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := subcommand(args, getenv, stderr)
	if err != nil {
		return err
	}
	one := func(what string) (string, error) {
		if len(args) != 2 {
			fmt.Fprintf(stderr, "usage: stockade workflow %s %s\n", args[0], what)
			return "", exitError(2)
		}
		return args[1], nil
	}
	switch args[0] {
	case "ls", "list":
		var out api.WorkflowList
		if err := c.json(ctx, "GET", "/api/v1/workflows", nil, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tTRIGGERS\tSTEPS\tSAVED\tBY")
		for _, w := range out.Workflows {
			var def workflow.Definition
			if err := json.Unmarshal(w.Definition, &def); err != nil {
				return fmt.Errorf("workflow %s: decode its definition: %w", w.Name, err)
			}
			var trig []string
			for _, t := range def.Triggers {
				trig = append(trig, t.Event)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", w.Name, w.Version, strings.Join(trig, ","), len(def.Steps),
				stamp(w.CreatedAt), w.Author)
		}
		return tw.Flush()
	case "show", "get":
		name, err := one("NAME")
		if err != nil {
			return err
		}
		var out api.Workflow
		if err := c.json(ctx, "GET", "/api/v1/workflows/"+url.PathEscape(name), nil, &out); err != nil {
			return err
		}
		_, err = io.WriteString(stdout, out.Source)
		return err
	case "apply":
		file, err := one("FILE (YAML; - is stdin)")
		if err != nil {
			return err
		}
		return workflowApply(ctx, c, file, stdout)
	case "rm", "delete":
		name, err := one("NAME")
		if err != nil {
			return err
		}
		if err := c.json(ctx, "DELETE", "/api/v1/workflows/"+url.PathEscape(name), nil, nil); err != nil {
			return err
		}
		fmt.Fprintln(stdout, name)
		return nil
	case "run":
		return workflowRun(ctx, c, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "stockade workflow: unknown command %q\n\n%s", args[0], usage)
	return exitError(2)
}

// workflowApply checks the file here (errors name the field and line), then
// saves it under the name it gives.
func workflowApply(ctx context.Context, c *apiClient, file string, stdout io.Writer) error {
	var src []byte
	var err error
	if file == "-" {
		src, err = io.ReadAll(io.LimitReader(os.Stdin, workflow.MaxSourceBytes+1))
	} else {
		src, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	p, err := workflow.NewParser()
	if err != nil {
		return err
	}
	def, err := p.Parse(src)
	if err != nil {
		var errs workflow.Errors
		if errors.As(err, &errs) {
			var b strings.Builder
			fmt.Fprintf(&b, "%s is not a valid workflow:", file)
			for _, fe := range errs {
				fmt.Fprintf(&b, "\n  %s: %s", fe.Field, fe.Detail)
			}
			return errors.New(b.String())
		}
		return err
	}
	resp, err := c.do(ctx, "PUT", "/api/v1/workflows/"+url.PathEscape(def.Name), bytes.NewReader(src), "application/yaml")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out api.Workflow
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("apply %s: decode the answer: %w", file, err)
	}
	fmt.Fprintf(stdout, "%s version %d\n", out.Name, out.Version)
	return nil
}

// stamp shows an API time to the second.
func stamp(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.Format(time.RFC3339)
}

// runEnded says whether r is over.
func runEnded(r api.Run) bool {
	switch r.State {
	case "succeeded", "failed", "cancelled", "timed_out", "skipped":
		return true
	}
	return false
}

func workflowRun(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("workflow run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ref := fs.String("ref", "", "git ref to run at")
	sha := fs.String("sha", "", "commit id to run at")
	wait := fs.Bool("wait", false, "follow the log until the run ends; exit 1 unless it succeeded")
	if err := fs.Parse(reorderFlags(args)); err != nil {
		return exitError(2)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: stockade workflow run NAME [--ref REF] [--sha SHA] [--wait]")
		return exitError(2)
	}
	var r api.Run
	if err := c.json(ctx, "POST", "/api/v1/workflows/"+url.PathEscape(fs.Arg(0))+"/runs", api.StartRun{Ref: *ref, SHA: *sha}, &r); err != nil {
		return err
	}
	if !*wait {
		fmt.Fprintln(stdout, r.ID)
		return nil
	}
	fmt.Fprintf(stderr, "run %s (#%d of %s)\n", r.ID, r.Number, r.Workflow)
	return followRun(ctx, c, r.ID, stdout, stderr)
}

// reorderFlags puts flags before the positional arguments, so "run NAME --ref x"
// works as well as "run --ref x NAME".
func reorderFlags(args []string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			rest = append(rest, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && !isRunBoolFlag(a) {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			rest = append(rest, a)
		}
	}
	return append(flags, rest...)
}

func isRunBoolFlag(a string) bool {
	a = strings.TrimLeft(a, "-")
	return a == "wait" || a == "f" || a == "follow"
}

// followRun streams the run's live log (GET .../log?follow=1) until the
// run ends, then exits 1 unless it succeeded. A queued run, or one running
// on another replica (the answer is the stored log), is polled.
func followRun(ctx context.Context, c *apiClient, id string, stdout, stderr io.Writer) error {
	streamed := false
	for {
		var r api.Run
		if err := c.json(ctx, "GET", "/api/v1/runs/"+url.PathEscape(id), nil, &r); err != nil {
			return err
		}
		if runEnded(r) {
			if !streamed {
				log, err := runLog(ctx, c, id)
				if err != nil {
					return err
				}
				io.WriteString(stdout, log)
			}
			if r.State != "succeeded" {
				fmt.Fprintf(stderr, "run %s %s: %s\n", id, r.State, r.StateReason)
				return exitError(1)
			}
			return nil
		}
		if r.State == "running" && !streamed {
			resp, err := c.do(ctx, "GET", "/api/v1/runs/"+url.PathEscape(id)+"/log?follow=1", nil, "")
			if err != nil {
				return err
			}
			if resp.Header.Get(api.LogSourceHeader) == "live" {
				_, err = io.Copy(stdout, resp.Body)
				streamed = err == nil
			}
			resp.Body.Close()
			if streamed {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func runLog(ctx context.Context, c *apiClient, id string) (string, error) {
	resp, err := c.do(ctx, "GET", "/api/v1/runs/"+url.PathEscape(id)+"/log", nil, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return string(b), err
}

// runCmd is the API client for runs: ls, show, logs, cancel, rerun.
func runCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := subcommand(args, getenv, stderr)
	if err != nil {
		return err
	}
	switch args[0] {
	case "ls", "list":
		fs := flag.NewFlagSet("run ls", flag.ContinueOnError)
		fs.SetOutput(stderr)
		wf := fs.String("workflow", "", "only this workflow's runs")
		state := fs.String("state", "", "only runs in this state")
		limit := fs.Int("limit", 50, "at most this many")
		if err := fs.Parse(args[1:]); err != nil {
			return exitError(2)
		}
		q := url.Values{"limit": {fmt.Sprint(*limit)}}
		if *wf != "" {
			q.Set("workflow", *wf)
		}
		if *state != "" {
			q.Set("state", *state)
		}
		var out api.RunList
		if err := c.json(ctx, "GET", "/api/v1/runs?"+q.Encode(), nil, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tWORKFLOW\t#\tSTATE\tTRIGGER\tREPOSITORY\tDURATION\tCOST\tCREATED\tREASON")
		for _, r := range out.Runs {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.4f\t%s\t%s\n", r.ID, r.Workflow, r.Number, r.State, r.Trigger, r.Repository,
				(time.Duration(r.DurationMS) * time.Millisecond).Round(time.Second), r.Cost, stamp(r.CreatedAt), r.StateReason)
		}
		return tw.Flush()
	case "show", "get":
		return showJSON(ctx, c, args, "run", "/api/v1/runs/", stdout, stderr)
	case "logs", "log":
		fs := flag.NewFlagSet("run logs", flag.ContinueOnError)
		fs.SetOutput(stderr)
		follow := fs.Bool("f", false, "follow until the run ends")
		if err := fs.Parse(reorderFlags(args[1:])); err != nil || fs.NArg() != 1 {
			fmt.Fprintln(stderr, "usage: stockade run logs [-f] ID")
			return exitError(2)
		}
		if *follow {
			return followRun(ctx, c, fs.Arg(0), stdout, stderr)
		}
		log, err := runLog(ctx, c, fs.Arg(0))
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, log)
		return err
	case "cancel", "rerun":
		if len(args) < 2 {
			fmt.Fprintf(stderr, "usage: stockade run %s ID...\n", args[0])
			return exitError(2)
		}
		var errs []error
		for _, id := range args[1:] {
			var r api.Run
			if err := c.json(ctx, "POST", "/api/v1/runs/"+url.PathEscape(id)+"/"+args[0], nil, &r); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", args[0], id, err))
				continue
			}
			fmt.Fprintf(stdout, "%s %s\n", r.ID, r.State)
		}
		return errors.Join(errs...)
	}
	fmt.Fprintf(stderr, "stockade run: unknown command %q\n\n%s", args[0], usage)
	return exitError(2)
}
