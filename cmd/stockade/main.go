// Command stockade is the Stockade control plane: `serve`, admin commands
// for scripting and first setup, and the API client.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(int(ee))
		}
		fmt.Fprintln(os.Stderr, "stockade:", err)
		os.Exit(1)
	}
}

// exitError ends the process with a status and no message.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

const usage = `Stockade: run AI agents on untrusted code, each tenant in its own VMs.

Usage:
  stockade serve                          run the web app and API
  stockade tenant create SLUG [--name N] [--admin EMAIL] [--exists-ok]
  stockade tenant ls
  stockade member add --tenant SLUG --email EMAIL --role ROLE
  stockade token create --tenant SLUG --role ROLE [--name N] [--ttl 30d]
  stockade image build [--templates busybox,debian]
  stockade host ls | add [--labels k=v,...] URI | cordon URI | uncordon URI | drain URI | rm URI
  stockade version

API client (STOCKADE_URL, default http://127.0.0.1:8080, and STOCKADE_TOKEN):
  stockade sandbox create [--template T] [--vcpus N] [--memory MiB] [--timeout 10m] [--env K=V]... [--volume NAME:PATH[:ro]]...
  stockade sandbox ls
  stockade sandbox show ID
  stockade sandbox exec [--cwd DIR] [--timeout 30s] [--env K=V]... [-i] ID -- CMD [ARG...]
  stockade sandbox cp LOCAL ID:PATH | ID:PATH LOCAL     ("-" is stdin or stdout; a folder's contents go into PATH or LOCAL)
  stockade sandbox ls [--depth N] [--json] ID:PATH      a folder's files
  stockade sandbox mkdir [--mode M] ID:PATH... | mv ID:SRC DST | rm [-r] ID:PATH...   files in a sandbox
  stockade sandbox port [--preview [--ttl 1h]] ID PORT  (the URL of a port; --preview: a link without a token)
  stockade sandbox rm ID...
  stockade sandbox start [--cwd DIR] [--timeout 1h] [--env K=V]... [--stdin] ID -- CMD [ARG...]   (background; prints its pid)
  stockade sandbox ps ID
  stockade sandbox logs [-f] [-offset N] ID PID
  stockade sandbox kill [-s SIGTERM] ID PID
  stockade sandbox timeout ID DURATION                   (the lifetime left from now, e.g. 30m)
  stockade sandbox pause ID... | resume ID...           freeze a sandbox (no CPU, no vCPU billing, lifetime stopped) or thaw it
  stockade sandbox attach [--watch] [--session S] ID [-- CMD...]  a terminal; Ctrl-] detaches
  stockade volume create NAME SIZE_GIB | ls | show NAME | resize NAME SIZE_GIB | rm NAME...   persistent volumes
  stockade usage export [--from D] [--to D] [--format csv|json] [--output FILE]  billing export (FOCUS columns)
  stockade usage summary [--from D] [--to D] [--json]             totals and top sandboxes, users, templates
  stockade template ls | show NAME | rm NAME...                  sandbox templates: the built-ins and the tenant's own
  stockade workflow ls | show NAME | apply FILE | rm NAME        workflows (YAML; apply checks it first)
  stockade workflow run NAME [--ref REF] [--sha SHA] [--wait]     start a run by hand; --wait follows its log
  stockade run ls [--workflow W] [--state S] | show ID | logs [-f] ID | cancel ID... | rerun ID...
  stockade template build -f RECIPE.yaml [--follow]             build a template from a recipe; --follow streams its log
  stockade template import NAME FILE.tar                         import a docker save tarball or OCI layout tar as a template
  stockade template import NAME --image REF [--credentials SECRET]  pull an image from an allowed registry
  stockade mcp [--json] [--inline-token] [--check]               how to add this server to a coding agent (MCP)

Configuration comes from the environment (see README), flags override it.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError(2)
	}
	if len(args) > 1 && (args[0] == "sandbox" || args[0] == "sandboxes") && args[1] == "attach" {
		return attachCmd(ctx, args[2:], getenv, os.Stdin, stdout, stderr)
	}
	if len(args) > 1 && (args[0] == "template" || args[0] == "templates") && args[1] == "build" {
		return templateBuildCmd(ctx, args[2:], getenv, stdout, stderr)
	}
	if len(args) > 1 && (args[0] == "template" || args[0] == "templates") && args[1] == "import" {
		return templateImportCmd(ctx, args[2:], getenv, stdout, stderr)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], getenv, stdout, stderr)
	case "tenant":
		return tenantCmd(ctx, args[1:], getenv, stdout, stderr)
	case "member":
		return memberCmd(ctx, args[1:], getenv, stdout, stderr)
	case "token":
		return tokenCmd(ctx, args[1:], getenv, stdout, stderr)
	case "image":
		return imageCmd(ctx, args[1:], getenv, stdout, stderr)
	case "sandbox", "sandboxes":
		return sandboxCmd(ctx, args[1:], getenv, os.Stdin, stdout, stderr)
	case "usage":
		return usageCmd(ctx, args[1:], getenv, stdout, stderr)
	case "host", "hosts":
		return hostCmd(ctx, args[1:], getenv, stdout, stderr)
	case "template", "templates":
		return templateCmd(ctx, args[1:], getenv, stdout, stderr)
	case "volume", "volumes":
		return volumeCmd(ctx, args[1:], getenv, stdout, stderr)
	case "workflow", "workflows":
		return workflowCmd(ctx, args[1:], getenv, stdout, stderr)
	case "run", "runs":
		return runCmd(ctx, args[1:], getenv, stdout, stderr)
	case "mcp":
		return mcpCmd(ctx, args[1:], getenv, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "stockade", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "stockade: unknown command %q\n\n%s", args[0], usage)
	return exitError(2)
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"
