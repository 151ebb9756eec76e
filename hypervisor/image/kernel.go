package image

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// xzMagic starts an xz stream (the payload of Debian's bzImage).
const xzMagic = "\xfd7zXZ\x00"

// extractVmlinux writes the uncompressed ELF kernel inside a bzImage to dst.
// QEMU boots that ELF directly through its PVH entry, which under TCG saves
// the seconds the kernel's own decompressor costs.
func extractVmlinux(ctx context.Context, vmlinuz, dst string) error {
	data, err := os.ReadFile(vmlinuz)
	if err != nil {
		return fmt.Errorf("extract vmlinux: %w", err)
	}
	// The magic may also occur by chance: try each until one decompresses to an ELF.
	var lastErr error = fmt.Errorf("no xz stream in %s", vmlinuz)
	for off := 0; ; {
		i := bytes.Index(data[off:], []byte(xzMagic))
		if i < 0 {
			break
		}
		off += i
		if err := xzDecompress(ctx, data[off:], dst); err != nil {
			lastErr = err
		} else if isELF(dst) {
			return nil
		} else {
			lastErr = fmt.Errorf("xz stream at %d is not an ELF kernel", off)
		}
		off += len(xzMagic)
	}
	os.Remove(dst)
	return fmt.Errorf("extract vmlinux from %s: %w", vmlinuz, lastErr)
}

func xzDecompress(ctx context.Context, in []byte, dst string) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	// --single-stream ignores what follows the payload in the bzImage.
	cmd := exec.CommandContext(ctx, "xz", "--decompress", "--stdout", "--single-stream")
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout = out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("xz: %w: %s", err, tail(stderr.String(), 300))
	}
	return out.Close()
}

func isELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// findKernel returns the vmlinuz and the module folder of an extracted
// linux-image package, and the kernel release.
func findKernel(root string) (vmlinuz, modDir, release string, err error) {
	matches, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(matches) != 1 {
		return "", "", "", fmt.Errorf("find kernel in %s: %d vmlinuz files, want 1", root, len(matches))
	}
	vmlinuz = matches[0]
	release = strings.TrimPrefix(filepath.Base(vmlinuz), "vmlinuz-")
	for _, lib := range []string{"lib", "usr/lib"} {
		d := filepath.Join(root, lib, "modules", release)
		if _, err := os.Stat(d); err == nil {
			return vmlinuz, d, release, nil
		}
	}
	return "", "", "", fmt.Errorf("find kernel in %s: no modules folder for %s", root, release)
}

// kmod is one loadable module file.
type kmod struct {
	Name    string
	Rel     string // path relative to the module folder
	Depends []string
	Later   bool // loaded after the agent's channel is open
}

// resolveModules returns the modules to load for now and then later,
// dependencies first, each once. Modules built into the kernel are skipped.
// The package ships no modules.dep (depmod makes it at install), so
// dependencies come from each module's own .modinfo.
func resolveModules(modDir string, now, later []string) ([]kmod, error) {
	files := map[string]string{}
	err := filepath.WalkDir(filepath.Join(modDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			rel, _ := filepath.Rel(modDir, p)
			files[modName(filepath.Base(p))] = rel
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list modules: %w", err)
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[modName(filepath.Base(l))] = true
		}
	}

	var order []kmod
	state := map[string]int{} // 1 visiting, 2 done
	isLater := false
	var visit func(name, from string) error
	visit = func(name, from string) error {
		name = modName(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		case 2:
			return nil
		}
		rel, ok := files[name]
		if !ok {
			if builtin[name] {
				state[name] = 2
				return nil
			}
			return fmt.Errorf("module %s (wanted by %s) not found in %s", name, from, modDir)
		}
		state[name] = 1
		deps, err := modDepends(filepath.Join(modDir, rel))
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, kmod{Name: name, Rel: rel, Depends: deps, Later: isLater})
		return nil
	}
	for _, w := range now {
		if err := visit(w, "the image recipe"); err != nil {
			return nil, err
		}
	}
	isLater = true
	for _, w := range later {
		if err := visit(w, "the image recipe"); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// modName normalises a module file or name: "crc32c-generic.ko" -> "crc32c_generic".
func modName(s string) string {
	return strings.ReplaceAll(strings.TrimSuffix(s, ".ko"), "-", "_")
}

// modDepends reads the depends= field of a module's .modinfo section.
func modDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read module %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("read module %s: no .modinfo", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read module %s: %w", path, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d = strings.TrimSpace(d); d != "" {
					deps = append(deps, d)
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}
