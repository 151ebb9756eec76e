package image

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// moduleListName and moduleListLater must match sandbox/agent's
// ModuleListName and ModuleListLater (this package imports nothing of ours):
// the agent loads the modules listed, in order, those after the "later:"
// line once the first host said hello.
const (
	moduleListName  = "modules.stockade"
	moduleListLater = "later:"
)

// sharedLib is a library crun loads, at the path ldd reported it.
type sharedLib struct {
	Path string // absolute path in the guest, as ldd resolved it
	Host string // the file on this host (symlinks resolved)
}

// crunLibraries runs ldd on crun and returns what it loads. The crun binary
// is the Debian package of this host's release, so the host's libraries are
// the versions it was built against.
func crunLibraries(ctx context.Context, crun string) ([]sharedLib, error) {
	out, err := command(ctx, "", "ldd", crun)
	if err != nil {
		return nil, fmt.Errorf("list crun libraries: %w", err)
	}
	return parseLdd(out)
}

func parseLdd(out []byte) ([]sharedLib, error) {
	var libs []sharedLib
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "linux-vdso") {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd: %s", line)
		}
		var p string
		if _, after, ok := strings.Cut(line, "=>"); ok {
			p = strings.Fields(after)[0]
		} else {
			p = strings.Fields(line)[0] // the dynamic loader: "/lib64/ld-linux-x86-64.so.2 (0x...)"
		}
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("ldd: unexpected line %q", line)
		}
		host, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("ldd: resolve %s: %w", p, err)
		}
		libs = append(libs, sharedLib{Path: p, Host: host})
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd: no libraries listed")
	}
	return libs, nil
}

// checkStatic fails unless path is a static ELF executable: the agent runs
// as the guest's first process, before any library exists.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("agent binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("agent binary %s is dynamically linked; build it with CGO_ENABLED=0", path)
		}
	}
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("agent binary %s is for %v, want x86-64", path, f.Machine)
	}
	return nil
}

// initramfsInputs is everything that goes into the initramfs: only what the
// guest runs. (The kernel unpacks every byte of it on an emulated CPU; there
// is no shell: the agent is PID 1 and a busybox for debugging by hand cost
// 2 MiB of every boot.)
type initramfsInputs struct {
	Agent   string // static stockade-agent
	Stub    string // the idle sandboxes' stub init (hypervisor/image/stubinit); "" for none
	Crun    string
	Libs    []sharedLib
	ModDir  string
	Release string
	Modules []kmod
}

func buildInitramfs(in initramfsInputs, dst string) (int64, error) {
	a := newCPIOArchive()
	for _, d := range []string{"dev", "proc", "sys", "run", "tmp", "etc", "root"} {
		mode := os.FileMode(0o755)
		if d == "tmp" {
			mode = 0o777 | os.ModeSticky
		}
		if err := a.dir(d, mode); err != nil {
			return 0, err
		}
	}
	// The kernel opens /dev/console for init's stdio before devtmpfs exists.
	if err := a.add(cpioEntry{Name: "dev/console", Mode: 0o600, Char: true, Major: 5, Minor: 1}); err != nil {
		return 0, err
	}
	add := func(name, src string, mode os.FileMode) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("initramfs %s: %w", name, err)
		}
		return a.file(name, mode, b)
	}
	agent, err := os.ReadFile(in.Agent)
	if err != nil {
		return 0, fmt.Errorf("initramfs init: %w", err)
	}
	if agent, err = stripELF(agent); err != nil {
		return 0, fmt.Errorf("initramfs init: %w", err)
	}
	if err := a.file("init", 0o755, agent); err != nil {
		return 0, err
	}
	// Beside the agent: the agent binds /init-stub into each sandbox when
	// it is there (hypervisor/image/stubinit).
	if in.Stub != "" {
		if err := add("init-stub", in.Stub, 0o755); err != nil {
			return 0, err
		}
	}
	if err := add("usr/bin/crun", in.Crun, 0o755); err != nil {
		return 0, err
	}
	for _, l := range in.Libs {
		if err := add(l.Path, l.Host, 0o755); err != nil {
			return 0, err
		}
	}
	modRoot := filepath.Join("lib/modules", in.Release)
	var list strings.Builder
	inLater := false
	for _, m := range in.Modules {
		if err := add(filepath.Join(modRoot, m.Rel), filepath.Join(in.ModDir, m.Rel), 0o644); err != nil {
			return 0, err
		}
		if m.Later && !inLater {
			list.WriteString(moduleListLater + "\n")
			inLater = true
		}
		list.WriteString(m.Rel + "\n")
	}
	if err := a.file(filepath.Join(modRoot, moduleListName), 0o644, []byte(list.String())); err != nil {
		return 0, err
	}

	f, err := os.Create(dst)
	if err != nil {
		return 0, fmt.Errorf("write initramfs: %w", err)
	}
	n, err := a.WriteTo(f)
	if err != nil {
		f.Close()
		return 0, fmt.Errorf("write initramfs: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("write initramfs: %w", err)
	}
	return n, nil
}
