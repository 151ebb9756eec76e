package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// baselineSpawn times a plain fork+exec of the template's `true` by the
// agent, spawn to exit, outside any sandbox: what a command costs the
// guest with nothing of ours around it.
func (m *Manager) baselineSpawn(ctx context.Context, name string) (time.Duration, error) {
	tpl, err := m.template(ctx, name, false)
	if err != nil {
		return 0, err
	}
	path, err := inRootBinary(tpl.dir, "bin/true")
	if err != nil {
		return 0, fmt.Errorf("spawn true: %w", err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	start := time.Now()
	p, done, err := m.cfg.Start(path, []string{"true"}, &os.ProcAttr{Dir: "/", Env: []string{"PATH=" + defaultPath},
		Files: []*os.File{devnull, devnull, devnull}})
	if err != nil {
		return 0, fmt.Errorf("spawn true: %w", err)
	}
	defer p.Release()
	stop := context.AfterFunc(ctx, func() { p.Kill() })
	defer stop()
	ws := <-done
	d := time.Since(start)
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return 0, fmt.Errorf("spawn true: exit %d signal %v", ws.ExitStatus(), ws.Signal())
	}
	return d, nil
}

// inRootBinary resolves rel inside root the way the sandbox would see it:
// a symlink's absolute target (busybox's applets) is read inside root.
func inRootBinary(root, rel string) (string, error) {
	p := filepath.Join(root, rel)
	for range 8 {
		fi, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if !fi.Mode().IsRegular() {
				return "", fmt.Errorf("%s is not a regular file", p)
			}
			return p, nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			p = filepath.Join(root, target)
		} else {
			p = filepath.Join(filepath.Dir(p), target)
		}
		if !strings.HasPrefix(p, filepath.Clean(root)+"/") {
			return "", fmt.Errorf("%s leads out of the template", rel)
		}
	}
	return "", fmt.Errorf("%s: too many links", rel)
}
