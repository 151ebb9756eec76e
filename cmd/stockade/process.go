package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
)

// The process API from the command line: start, ps, logs, kill, and a
// sandbox's remaining lifetime (timeout).

// processCmd runs `stockade sandbox start|ps|logs|kill|timeout`; ok is
// false for another sub-command.
func processCmd(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) (ok bool, err error) {
	switch args[0] {
	case "start":
		return true, processStart(ctx, c, args[1:], stdout, stderr)
	case "ps":
		return true, processList(ctx, c, args[1:], stdout, stderr)
	case "logs":
		return true, processLogs(ctx, c, args[1:], stdout, stderr)
	case "kill":
		return true, processKill(ctx, c, args[1:], stdout, stderr)
	case "timeout":
		return true, sandboxTimeout(ctx, c, args[1:], stdout, stderr)
	}
	return false, nil
}

func processesPath(id string) string { return "/api/v1/sandboxes/" + url.PathEscape(id) + "/processes" }

func processStart(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox start", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cwd := fs.String("cwd", "", "working directory (default /workspace)")
	timeout := fs.Duration("timeout", 0, "kill it after this long (default: none, it lives as long as the sandbox)")
	stdin := fs.Bool("stdin", false, "keep its stdin open (write with the API's .../stdin)")
	tag := fs.String("tag", "", "a label of your own")
	env := listFlag{}
	fs.Var(env, "env", "KEY=VALUE for this process (repeatable)")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	rest := fs.Args()
	if len(rest) > 1 && rest[1] == "--" {
		rest = append(rest[:1], rest[2:]...)
	}
	if len(rest) < 2 {
		fmt.Fprintln(stderr, "usage: stockade sandbox start [flags] ID -- CMD [ARG...]")
		return exitError(2)
	}
	in := api.StartProcess{Cmd: rest[1:], Cwd: *cwd, TimeoutSeconds: seconds(*timeout), Stdin: *stdin, Tag: *tag}
	if len(env) > 0 {
		in.Env = env
	}
	var out api.Process
	if err := c.json(ctx, "POST", processesPath(rest[0]), in, &out); err != nil {
		return err
	}
	fmt.Fprintln(stdout, out.PID)
	return nil
}

func processList(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: stockade sandbox ps ID")
		return exitError(2)
	}
	var out api.ProcessList
	if err := c.json(ctx, "GET", processesPath(args[0]), nil, &out); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tSTATE\tEXIT\tSTARTED\tOUTPUT\tCOMMAND")
	for _, p := range out.Processes {
		exit := ""
		if p.ExitCode != nil {
			exit = strconv.Itoa(*p.ExitCode)
			if p.Signal != "" {
				exit += " (" + p.Signal + ")"
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", p.PID, p.State, exit, p.StartedAt, p.OutputBytes, strings.Join(p.Cmd, " "))
	}
	return tw.Flush()
}

// processArgs parses "ID PID".
func processArgs(fs *flag.FlagSet, stderr io.Writer, usage string) (string, uint32, error) {
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, usage)
		return "", 0, exitError(2)
	}
	pid, err := strconv.ParseUint(fs.Arg(1), 10, 32)
	if err != nil || pid == 0 {
		fmt.Fprintf(stderr, "stockade: %q is not a pid\n", fs.Arg(1))
		return "", 0, exitError(2)
	}
	return fs.Arg(0), uint32(pid), nil
}

// processLogs prints a process's output from an offset; with -f it follows
// it until it ends. stdout and stderr go to ours.
func processLogs(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox logs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	follow := fs.Bool("f", false, "follow: print what it prints next, until it ends")
	offset := fs.Int64("offset", 0, "the output byte to start from (stdout and stderr together)")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	id, pid, err := processArgs(fs, stderr, "usage: stockade sandbox logs [-f] [-offset N] ID PID")
	if err != nil {
		return err
	}
	q := url.Values{"offset": {strconv.FormatInt(*offset, 10)}}
	if *follow {
		q.Set("follow", "1")
	}
	resp, err := c.do(ctx, "GET", fmt.Sprintf("%s/%d/output?%s", processesPath(id), pid, q.Encode()), nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	done, err := readEvents(resp.Body, "logs", func(ev *api.ProcessEvent) (string, string) { return ev.Data, ev.DataBase64 },
		func(ev *api.ProcessEvent, data []byte) (bool, error) {
			switch ev.Type {
			case "stdout":
				stdout.Write(data)
			case "stderr":
				stderr.Write(data)
			case "status":
				if p := ev.Process; p != nil && p.State != "running" && *follow {
					fmt.Fprintf(stderr, "stockade: process %d %s", p.PID, p.State)
					if p.ExitCode != nil {
						fmt.Fprintf(stderr, " (exit %d, %s)", *p.ExitCode, p.Reason)
					}
					fmt.Fprintln(stderr)
				}
				return true, nil
			}
			return false, nil
		})
	if done || err != nil {
		return err
	}
	return errors.New("logs: the server ended the stream before its status")
}

func processKill(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox kill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sig := fs.String("s", "SIGKILL", "the signal: SIGTERM, SIGINT, SIGHUP, ...")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	id, pid, err := processArgs(fs, stderr, "usage: stockade sandbox kill [-s SIGNAL] ID PID")
	if err != nil {
		return err
	}
	if err := c.json(ctx, "POST", fmt.Sprintf("%s/%d/signal", processesPath(id), pid), api.ProcessSignal{Signal: *sig}, nil); err != nil {
		return err
	}
	fmt.Fprintln(stdout, pid)
	return nil
}

// sandboxTimeout sets a running sandbox's remaining lifetime from now.
func sandboxTimeout(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "usage: stockade sandbox timeout ID DURATION   (e.g. 30m: the lifetime left from now)")
		return exitError(2)
	}
	d, err := time.ParseDuration(args[1])
	if err != nil || d < time.Second {
		fmt.Fprintf(stderr, "stockade: %q is not a duration of 1s or more (e.g. 90s, 30m, 2h)\n", args[1])
		return exitError(2)
	}
	var out api.Sandbox
	if err := c.json(ctx, "POST", "/api/v1/sandboxes/"+url.PathEscape(args[0])+"/timeout", api.SetTimeout{TimeoutSeconds: seconds(d)}, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s expires at %s\n", out.ID, out.ExpiresAt)
	return nil
}
