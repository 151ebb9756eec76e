package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/stockade-dev/stockade/handlers/api"
)

// sandboxCmd is the API client for sandboxes: create, ls, show, exec, cp, rm.
func sandboxCmd(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	c, err := subcommand(args, getenv, stderr)
	if err != nil {
		return err
	}
	if ok, err := processCmd(ctx, c, args, stdout, stderr); ok { // process.go
		return err
	}
	switch args[0] {
	case "create":
		return sandboxCreate(ctx, c, args[1:], stdout, stderr)
	case "ls", "list":
		if len(args) > 1 { // ID:PATH: a folder's files (files.go)
			return sandboxListFiles(ctx, c, args[1:], stdout, stderr)
		}
		return sandboxList(ctx, c, stdout)
	case "mkdir":
		return sandboxMakeDir(ctx, c, args[1:], stdout, stderr)
	case "mv":
		return sandboxMove(ctx, c, args[1:], stdout, stderr)
	case "show", "get":
		return showJSON(ctx, c, args, "sandbox", "/api/v1/sandboxes/", stdout, stderr)
	case "exec":
		return sandboxExec(ctx, c, args[1:], stdin, stdout, stderr)
	case "port":
		return sandboxPort(ctx, c, args[1:], stdout, stderr)
	case "cp":
		return sandboxCopy(ctx, c, args[1:], stdin, stdout, stderr)
	case "pause", "resume": // pause.go
		return sandboxPause(ctx, c, args[0], args[1:], stdout, stderr)
	case "rm", "destroy":
		if len(args) < 2 {
			fmt.Fprintln(stderr, "usage: stockade sandbox rm ID...")
			return exitError(2)
		}
		if isFileArgs(args[1:]) { // rm [-r] ID:PATH...: files (files.go)
			return sandboxRemoveFiles(ctx, c, args[1:], stdout, stderr)
		}
		var errs []error
		for _, id := range args[1:] {
			if err := c.json(ctx, "DELETE", "/api/v1/sandboxes/"+url.PathEscape(id), nil, nil); err != nil {
				errs = append(errs, fmt.Errorf("rm %s: %w", id, err))
				continue
			}
			fmt.Fprintln(stdout, id)
		}
		return errors.Join(errs...)
	}
	fmt.Fprintf(stderr, "stockade sandbox: unknown command %q\n\n%s", args[0], usage)
	return exitError(2)
}

// listFlag collects repeated KEY=VALUE flags.
type listFlag map[string]string

func (l listFlag) String() string { return "" }

func (l listFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", v)
	}
	l[k] = val
	return nil
}

func sandboxCreate(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	template := fs.String("template", "", "template name (default: the server's)")
	vcpus := fs.Int("vcpus", 0, "vCPUs (default 1)")
	memory := fs.Int("memory", 0, "memory in MiB (default: the server's)")
	timeout := fs.Duration("timeout", 0, "lifetime, e.g. 10m or 2h (default: the server's, 1h)")
	idle := fs.Duration("idle-timeout", 0, "stop after this long without a command or file (default none)")
	env, meta := listFlag{}, listFlag{}
	fs.Var(env, "env", "KEY=VALUE added to every command (repeatable)")
	fs.Var(meta, "meta", "KEY=VALUE label (repeatable)")
	var vols volumeFlag
	fs.Var(&vols, "volume", "NAME:PATH[:ro] a volume of the tenant mounted at PATH (repeatable)")
	key := fs.String("idempotency-key", "", "Idempotency-Key of the create (default: a new random one); retries send the same")
	attemptTimeout := fs.Duration("attempt-timeout", 5*time.Minute, "give up on one attempt after this long, and retry")
	retries := fs.Int("retries", 3, "retries after a timeout, a lost connection or an unavailable server")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "stockade sandbox create: unexpected %q\n", fs.Arg(0))
		return exitError(2)
	}
	in := api.CreateSandbox{Template: *template, VCPUs: *vcpus, MemoryMiB: *memory,
		TimeoutSeconds: seconds(*timeout), IdleTimeoutSeconds: seconds(*idle), Volumes: vols}
	if len(env) > 0 {
		in.Env = env
	}
	if len(meta) > 0 {
		in.Metadata = meta
	}
	var out api.Sandbox
	if *key == "" {
		*key = uuid.NewString()
	}
	// The same key on every attempt: a retry of a create the server did
	// finish answers that sandbox, never a second one.
	err := retryIdempotent(ctx, *retries, *attemptTimeout, stderr, func(ctx context.Context) error {
		return c.json(ctx, "POST", "/api/v1/sandboxes", in, &out, api.IdempotencyHeader, *key)
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, out.ID)
	return nil
}

// retryIdempotent runs an idempotent call, each attempt bounded by
// attemptTimeout, retrying up to retries times (1 s, 2 s, 4 s ... apart)
// when it timed out, the connection failed, the server was unavailable or
// the first attempt still ran there.
func retryIdempotent(ctx context.Context, retries int, attemptTimeout time.Duration, stderr io.Writer, call func(context.Context) error) error {
	delay := time.Second
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := call(actx)
		cancel()
		if err == nil || ctx.Err() != nil || attempt >= retries || !retryable(err) {
			return err
		}
		fmt.Fprintf(stderr, "stockade: %v; retrying in %s with the same Idempotency-Key\n", err, delay)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(delay*2, 30*time.Second)
	}
}

func retryable(err error) bool {
	var p *problemError
	if errors.As(err, &p) {
		switch p.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		case http.StatusConflict:
			return strings.Contains(p.Detail, api.IdempotencyHeader) // the first attempt still runs
		}
		return false
	}
	// Timeouts, refused or dropped connections (a server restarting).
	return true
}

func sandboxList(ctx context.Context, c *apiClient, stdout io.Writer) error {
	var out api.SandboxList
	if err := c.json(ctx, "GET", "/api/v1/sandboxes", nil, &out); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTEMPLATE\tVCPUS\tMEMORY\tCREATED\tEXPIRES\tREASON")
	for _, s := range out.Sandboxes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d MiB\t%s\t%s\t%s\n", s.ID, s.State, s.Template, s.VCPUs, s.MemoryMiB, s.CreatedAt, s.ExpiresAt, s.StateReason)
	}
	return tw.Flush()
}

func sandboxExec(ctx context.Context, c *apiClient, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cwd := fs.String("cwd", "", "working directory (default /workspace)")
	timeout := fs.Duration("timeout", 0, "kill the command after this long (default: the server's, 10m)")
	withStdin := fs.Bool("i", false, "send this command's stdin to the command (read to its end first)")
	env := listFlag{}
	fs.Var(env, "env", "KEY=VALUE for this command (repeatable)")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) < 2 {
		fmt.Fprintln(stderr, "usage: stockade sandbox exec [flags] ID -- CMD [ARG...]")
		return exitError(2)
	}
	id, cmd := rest[0], rest[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	in := api.ExecRequest{Cmd: cmd, Cwd: *cwd, TimeoutSeconds: seconds(*timeout)}
	if len(env) > 0 {
		in.Env = env
	}
	if *withStdin {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		in.Stdin = string(b)
	}
	b, _ := json.Marshal(in)
	resp, err := c.do(ctx, "POST", "/api/v1/sandboxes/"+url.PathEscape(id)+"/exec?stream=1", strings.NewReader(string(b)), "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	done, err := readEvents(resp.Body, "exec", func(ev *api.ExecEvent) (string, string) { return ev.Data, ev.DataBase64 },
		func(ev *api.ExecEvent, data []byte) (bool, error) {
			switch ev.Type {
			case "stdout":
				stdout.Write(data)
			case "stderr":
				stderr.Write(data)
			case "exit":
				if ev.Reason != "" && ev.Reason != "exited" {
					fmt.Fprintf(stderr, "stockade: command ended: %s", ev.Reason)
					if ev.Signal != "" {
						fmt.Fprintf(stderr, " (signal %s)", ev.Signal)
					}
					fmt.Fprintln(stderr)
				}
				if ev.ExitCode != nil && *ev.ExitCode != 0 {
					return true, exitError(*ev.ExitCode)
				}
				return true, nil
			case "error":
				return true, fmt.Errorf("exec: %s", ev.Detail)
			}
			return false, nil
		})
	if done || err != nil {
		return err
	}
	return errors.New("exec: the server ended the stream before the command's exit")
}

// sandboxCopy copies a file into or out of a sandbox: cp LOCAL ID:PATH or
// cp ID:PATH LOCAL, "-" meaning stdin or stdout.
func sandboxCopy(ctx context.Context, c *apiClient, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox cp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", "", "permission bits of a file written into the sandbox, octal (default: the local file's, or 0644)")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "usage: stockade sandbox cp LOCAL ID:PATH | ID:PATH LOCAL")
		return exitError(2)
	}
	src, dst := fs.Arg(0), fs.Arg(1)
	remote := func(s string) (id, path string, ok bool) {
		id, path, ok = strings.Cut(s, ":")
		return id, path, ok && id != "" && path != "" && !strings.Contains(id, "/")
	}
	if id, path, ok := remote(dst); ok {
		var r io.Reader = stdin
		size := int64(-1)
		m := *mode
		if src != "-" {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			if fi.IsDir() {
				return copyDirIn(ctx, c, src, id, path, *mode, stderr)
			}
			r, size = f, fi.Size()
			if m == "" {
				m = fmt.Sprintf("%o", fi.Mode().Perm())
			}
		}
		q := url.Values{"path": {path}}
		if m != "" {
			q.Set("mode", m)
		}
		var out api.File
		resp, err := c.do(ctx, "PUT", "/api/v1/sandboxes/"+url.PathEscape(id)+"/files?"+q.Encode(), sizedReader{r, size}, "application/octet-stream")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return fmt.Errorf("cp: decode the answer: %w", err)
		}
		return nil
	}
	if id, path, ok := remote(src); ok {
		if e, err := remoteStat(ctx, c, id, path); err == nil && e.Type == "dir" && dst != "-" {
			return copyDirOut(ctx, c, id, path, dst)
		}
		resp, err := c.do(ctx, "GET", "/api/v1/sandboxes/"+url.PathEscape(id)+"/files?"+url.Values{"path": {path}}.Encode(), nil, "")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if dst == "-" {
			_, err := io.Copy(stdout, resp.Body)
			return err
		}
		if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
			dst = filepath.Join(dst, filepath.Base(path))
		}
		tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".part-")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		n, err := io.Copy(tmp, resp.Body)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		if resp.ContentLength >= 0 && n != resp.ContentLength {
			return fmt.Errorf("cp: got %d of %d bytes: the transfer was cut short", n, resp.ContentLength)
		}
		return os.Rename(tmp.Name(), dst)
	}
	fmt.Fprintln(stderr, "stockade sandbox cp: one side must be ID:PATH")
	return exitError(2)
}

// seconds is d in whole seconds, rounded up (0 stays 0: the server's default).
func seconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// sizedReader tells net/http the body's length when it is known (so the
// server can refuse a file over its limit before it is sent).
type sizedReader struct {
	io.Reader
	size int64
}

func writeIndented(w io.Writer, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
