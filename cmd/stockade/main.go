// Command stockade is the Stockade control plane: `serve`, admin commands
// for scripting and first setup, and (later) the API client.
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
  stockade version

Configuration comes from the environment (see README), flags override it.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError(2)
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
