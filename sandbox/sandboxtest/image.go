package sandboxtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/hypervisor/image"
)

// DataDir is the guest image folder VM tests share (as `make test` and the
// VM pool tests do): STOCKADE_TEST_DATA_DIR, default /var/tmp/stockade-test-data.
func DataDir() string { return hypervisortest.TestDataDir() }

// GuestImage returns the image in dir, building it first (the busybox
// template plus any named in also, with a freshly built agent) when it is
// missing, lacks one of those templates, or is older than a source file of
// the guest agent, its protocol or the image recipe: an image built before
// those changed would speak an old protocol or miss a template change. A rebuild keeps the templates already built
// (debootstrap runs once per data dir, about a minute). Builds are locked,
// so concurrent test binaries never interleave.
func GuestImage(ctx context.Context, dir string, also ...string) (image.Manifest, error) {
	want := append([]string{image.TemplateBusybox}, also...)
	m, err := image.Load(dir)
	if err == nil && !agentChangedSince(m.BuiltAt) && hasTemplates(m, want) {
		return m, nil
	}
	tmp, err := os.MkdirTemp("", "sandboxtest-agent-")
	if err != nil {
		return image.Manifest{}, err
	}
	defer os.RemoveAll(tmp)
	agent := filepath.Join(tmp, "stockade-agent")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", agent, "./cmd/stockade-agent")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return image.Manifest{}, fmt.Errorf("build stockade-agent: %w: %s", err, out)
	}
	bctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	m, err = image.Build(bctx, image.Options{DataDir: dir, AgentBinary: agent, Progress: &progress, Templates: want})
	if err != nil {
		return image.Manifest{}, fmt.Errorf("image build: %w\n%s", err, progress.String())
	}
	return m, nil
}

func hasTemplates(m image.Manifest, names []string) bool {
	for _, n := range names {
		if _, ok := m.Template(n); !ok {
			return false
		}
	}
	return true
}

// repoRoot is the module root, found from this file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// agentChangedSince reports whether a Go source of the guest agent, its
// protocol or the image recipe was modified after t.
func agentChangedSince(t time.Time) bool {
	changed := false
	for _, dir := range []string{"cmd/stockade-agent", "sandbox/agent", "sandbox/agentproto", "hypervisor/image"} {
		_ = filepath.WalkDir(filepath.Join(repoRoot(), dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".c")) || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			if fi, err := d.Info(); err == nil && fi.ModTime().After(t) {
				changed = true
			}
			return nil
		})
	}
	return changed
}
