// Command stockade-agent is the guest init and agent of Stockade VMs. As PID 1
// it boots the guest and serves the host over the virtio-serial channel; run
// otherwise it serves the same protocol on a listener or a port, for
// development and tests. Build it static: CGO_ENABLED=0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agent"
	"github.com/stockade-dev/stockade/sandbox/agent/sandboxinit"
	"github.com/stockade-dev/stockade/sandbox/agent/vminit"
)

// version is set at build time: -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// A sandbox's init is PID 1 of its own namespace: look at the command
	// before taking PID 1 to mean "boot the guest".
	if len(os.Args) > 1 && os.Args[1] == "sandbox-init" {
		if err := runSandboxInit(os.Args[2:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "stockade-agent sandbox-init:", err)
			os.Exit(1)
		}
		return
	}
	if os.Getpid() == 1 {
		runInit()
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "stockade-agent:", err)
		os.Exit(1)
	}
}

// runInit never returns: PID 1 exiting panics the kernel.
func runInit() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	err := vminit.Init(context.Background(), version, log)
	log.Error("init failed; powering off", "err", err)
	for {
		if err := vminit.PowerOff(); err != nil {
			log.Error("power off", "err", err)
		}
		time.Sleep(time.Second)
	}
}

// runSandboxInit serves the agent inside a sandbox: on the listener crun
// handed over (--listen-fd), or on a socket path (--socket, for tests).
func runSandboxInit(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox-init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listenFD := fs.Int("listen-fd", -1, "serve on this inherited SOCK_SEQPACKET listener")
	socket := fs.String("socket", "", "serve on a new SOCK_SEQPACKET listener at this path")
	idleMS := fs.Int("idle-ms", 0, "exec the stub init (--stub) when idle this long; 0 never")
	stub := fs.String("stub", "", "the stub init of an idle sandbox (hypervisor/image/stubinit)")
	outsideOnly := fs.Bool("outside-only", false, "accept connections only from outside the PID namespace (always as PID 1)")
	connFD := fs.Int("conn-fd", -1, "a connection the stub init accepted, to serve first")
	var holdFDs []int
	fs.Func("hold-fd", "a hello connection the stub init held (repeatable)", func(v string) error {
		fd, err := strconv.Atoi(v)
		holdFDs = append(holdFDs, fd)
		return err
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := sandboxinit.InitOptions{OutsideOnly: *outsideOnly || os.Getpid() == 1,
		IdleAfter: time.Duration(*idleMS) * time.Millisecond, Stub: *stub, InitPath: os.Args[0]}
	if *connFD >= 0 {
		c, err := sandboxinit.InheritedConn(*connFD)
		if err != nil {
			return err
		}
		o.Conn = c
	}
	for _, fd := range holdFDs {
		c, err := sandboxinit.InheritedConn(fd)
		if err != nil {
			return err
		}
		o.Held = append(o.Held, c)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var ln *net.UnixListener
	switch {
	case *listenFD >= 0:
		f := os.NewFile(uintptr(*listenFD), "listener")
		l, err := net.FileListener(f)
		f.Close() // FileListener holds its own copy, close-on-exec
		if err != nil {
			return fmt.Errorf("listener fd %d: %w", *listenFD, err)
		}
		ul, ok := l.(*net.UnixListener)
		if !ok {
			return fmt.Errorf("listener fd %d is not a unix socket", *listenFD)
		}
		ln = ul
	case *socket != "":
		l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: *socket, Net: "unixpacket"})
		if err != nil {
			return err
		}
		ln = l
	default:
		return errors.New("give --listen-fd N or --socket PATH")
	}
	o.Logger = log
	return sandboxinit.RunSandboxInit(context.Background(), ln, o)
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("stockade-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "serve on this address: host:port, or unix:/path")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" {
		return errors.New("not PID 1: give -listen ADDR to serve the agent protocol")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	network, addr := "tcp", *listen
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", p
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	context.AfterFunc(ctx, func() { ln.Close() })

	// Not PID 1: "power off" ends this process.
	srv, err := agent.NewServer(agent.Config{
		Version: version, Logger: log,
		PowerOff: func() error { cancel(); return nil },
	})
	if err != nil {
		return err
	}
	log.Info("serving", "addr", ln.Addr().String())
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		go func() {
			if err := srv.Serve(ctx, c); err != nil && !errors.Is(err, context.Canceled) {
				log.Warn("session", "err", err)
			}
		}()
	}
}
