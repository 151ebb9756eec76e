// Package stubinit builds the stub init of an idle sandbox: a small static C
// program (c/stub.c) that is PID 1 of a sandbox while it is idle, in place of
// the Go sandbox init (sandbox/agent/sandboxinit), whose runtime alone
// costs an idle sandbox about a MiB of guest memory and seven threads. The
// Go init execs the stub when idle; the stub execs the Go init again on the
// next connection (README "Design notes": why C here).
//
// The image build compiles it on the host (Build) and ships it in the
// initramfs beside the agent.
package stubinit

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed c/stub.c
var source []byte

// SourceSHA256 is the hex SHA-256 of the stub's source: an input of the
// guest image's version.
func SourceSHA256() string {
	s := sha256.Sum256(source)
	return hex.EncodeToString(s[:])
}

// Build compiles the stub to dst: a static, stripped x86-64 executable
// (gcc -static -Os; Debian's gcc and libc6-dev, scripts/deps.sh).
func Build(ctx context.Context, dst string) error {
	dir, err := os.MkdirTemp("", "stubinit-")
	if err != nil {
		return fmt.Errorf("build stub init: %w", err)
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "stub.c")
	if err := os.WriteFile(src, source, 0o600); err != nil {
		return fmt.Errorf("build stub init: %w", err)
	}
	cmd := exec.CommandContext(ctx, "gcc", "-static", "-Os", "-s", "-Wall", "-Werror", "-o", dst, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build stub init (gcc -static; scripts/deps.sh installs gcc and libc6-dev): %w: %s", err, out)
	}
	return nil
}
