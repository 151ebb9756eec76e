package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Tenant templates (pack.go). A tenant's template is built elsewhere (a
// recipe's builder sandbox, an OCI image's flattened layers) into a plain
// directory; PackTemplate turns that directory into the same read-only ext4
// image the built-ins are, with the marker the guest agent mounts it by.

// Packed is what PackTemplate made.
type Packed struct {
	Size   int64  // bytes of the image file
	SHA256 string // hex digest of the image file
}

var inVMNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// PackTemplate writes the marker (inVMName, version) and the sandbox user
// and directories into tree, then makes the ext4 image of tree at dst
// (which must not exist). inVMName is the name the guest agent knows the
// template by (unique among the disks of one VM). On error nothing is left
// at dst.
func PackTemplate(ctx context.Context, tree, dst, inVMName, version string) (Packed, error) {
	if !inVMNameRE.MatchString(inVMName) {
		return Packed{}, fmt.Errorf("pack template: bad in-VM name %q", inVMName)
	}
	if version == "" {
		return Packed{}, errors.New("pack template: no version")
	}
	fi, err := os.Stat(tree)
	if err != nil {
		return Packed{}, fmt.Errorf("pack template: %w", err)
	}
	if !fi.IsDir() {
		return Packed{}, fmt.Errorf("pack template: %s is not a directory", tree)
	}
	if _, err := os.Lstat(dst); err == nil {
		return Packed{}, fmt.Errorf("pack template: %s exists", dst)
	}
	if err := EnsureSandboxUser(tree); err != nil {
		return Packed{}, fmt.Errorf("pack template: %w", err)
	}
	if err := writeTemplateMarker(tree, inVMName, version); err != nil {
		return Packed{}, fmt.Errorf("pack template: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(dst)
		}
	}()
	if err := mkfsExt4(ctx, tree, dst, templateLabel(inVMName), uuidOf(version)); err != nil {
		return Packed{}, fmt.Errorf("pack template: %w", err)
	}
	sum, err := fileSHA256(dst)
	if err != nil {
		return Packed{}, fmt.Errorf("pack template: %w", err)
	}
	st, err := os.Stat(dst)
	if err != nil {
		return Packed{}, fmt.Errorf("pack template: %w", err)
	}
	ok = true
	return Packed{Size: st.Size(), SHA256: sum}, nil
}

// EnsureSandboxUser gives tree the sandbox user (uid 1000) in etc/passwd
// and etc/group when it has none, and its directories (/tmp, /workspace,
// the user's home) — what every sandbox needs. A uid 1000 already present
// under another name stays and is the one commands run as. It refuses an
// etc/passwd or etc/group that is a symlink or not a regular file (a tree
// from an image must not make the host write elsewhere).
func EnsureSandboxUser(tree string) error {
	for _, d := range []string{"etc", "proc", "sys", "dev", "run"} {
		if err := mkdirNoFollow(tree, d); err != nil {
			return err
		}
	}
	passwd := fmt.Sprintf("%s:x:%d:%d:sandbox:/home/%s:/bin/sh\n", sandboxUser, sandboxUID, sandboxUID, sandboxUser)
	if err := ensureLine(tree, "etc/passwd", fmt.Sprintf(":x:%d:", sandboxUID), sandboxUser+":", passwd); err != nil {
		return err
	}
	group := fmt.Sprintf("%s:x:%d:\n", sandboxUser, sandboxUID)
	if err := ensureLine(tree, "etc/group", fmt.Sprintf(":x:%d:", sandboxUID), sandboxUser+":", group); err != nil {
		return err
	}
	for _, d := range []string{"tmp", "workspace", "home", "home/" + sandboxUser} {
		if err := mkdirNoFollow(tree, d); err != nil {
			return err
		}
	}
	return sandboxDirs(tree)
}

// mkdirNoFollow makes tree/rel a directory, refusing a symlink on the way.
func mkdirNoFollow(tree, rel string) error {
	p := tree
	for _, part := range strings.Split(rel, "/") {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(p, 0o755); err != nil {
				return fmt.Errorf("template dirs: %w", err)
			}
		case err != nil:
			return fmt.Errorf("template dirs: %w", err)
		case !fi.IsDir():
			return fmt.Errorf("template dirs: /%s is not a directory", rel)
		}
	}
	return nil
}

// ensureLine appends line to tree/rel unless a line already contains has
// or starts with prefix; rel must be a regular file or missing.
func ensureLine(tree, rel, has, prefix, line string) error {
	p := filepath.Join(tree, rel)
	fi, err := os.Lstat(p)
	var b []byte
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("template user: %w", err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("template user: /%s is not a regular file", rel)
	default:
		if b, err = os.ReadFile(p); err != nil {
			return fmt.Errorf("template user: %w", err)
		}
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, has) || strings.HasPrefix(l, prefix) {
			return nil
		}
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	if err := os.WriteFile(p, append(b, line...), 0o644); err != nil {
		return fmt.Errorf("template user: %w", err)
	}
	return nil
}
