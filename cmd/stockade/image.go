package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockade-dev/stockade/hypervisor/image"
)

func imageCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "build" {
		fmt.Fprintln(stderr, "usage: stockade image build [--templates busybox,debian,node,build] [--agent PATH]")
		return exitError(2)
	}
	var cfg config
	fs := flag.NewFlagSet("image build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.flags(fs, getenv)
	templates := fs.String("templates", strings.Join(image.BuiltinTemplates(), ","), "sandbox templates to build")
	agent := fs.String("agent", "", "static stockade-agent binary (default: next to this executable, then ./bin)")
	if err := fs.Parse(args[1:]); err != nil {
		return exitError(2)
	}
	if err := cfg.check(); err != nil {
		return err
	}
	if *agent == "" {
		p, err := findAgent()
		if err != nil {
			return err
		}
		*agent = p
	}
	var names []string
	for _, n := range strings.Split(*templates, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	m, err := image.Build(ctx, image.Options{DataDir: cfg.DataDir, AgentBinary: *agent, Progress: stdout, Templates: names})
	if err != nil {
		return fmt.Errorf("image build: %w", err)
	}
	fmt.Fprintf(stdout, "guest %s ready: %s\n", m.Guest.Version, filepath.Dir(m.Guest.Kernel))
	for _, t := range m.Templates {
		fmt.Fprintf(stdout, "template %s %s ready: %s\n", t.Name, t.Version, t.Path)
	}
	return nil
}

// findAgent looks for stockade-agent beside this executable, then in ./bin.
func findAgent() (string, error) {
	var tried []string
	if exe, err := os.Executable(); err == nil {
		tried = append(tried, filepath.Join(filepath.Dir(exe), "stockade-agent"))
	}
	tried = append(tried, filepath.Join("bin", "stockade-agent"))
	for _, p := range tried {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return filepath.Abs(p)
		}
	}
	return "", errors.New("stockade-agent not found (tried " + strings.Join(tried, ", ") + "); build it with `make build` or pass --agent")
}
