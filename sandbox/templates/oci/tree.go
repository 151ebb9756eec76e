package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Limits bound what one import may lay out.
type Limits struct {
	// MaxBytes bounds the file data written into the tree, over all
	// layers (a file a later layer replaces still counted): the room left
	// in the tenant's template storage quota.
	MaxBytes int64
	// MaxEntries bounds the entries of all layers; 0 is DefaultMaxEntries.
	MaxEntries int
	// Quota names the quota MaxBytes comes from, for the error.
	Quota string
}

// DefaultMaxEntries is Limits.MaxEntries' default: a Debian image holds
// some 10 000 files.
const DefaultMaxEntries = 500_000

// Bounds of one name in a layer.
const (
	maxNameLen = 4096
	maxElemLen = 255
	// maxLinkHops bounds the symlinks followed when checking where one
	// resolves (the kernel's own bound is 40).
	maxLinkHops = 40
)

// refusal is the error of an image refused for what it holds: a 422 on
// the field "image", its detail the sentence.
func refusal(rule, format string, args ...any) error {
	return &errdefs.FieldError{Field: "image", Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// tree lays out a template's root from image layers. Nothing is written,
// removed or created through a symlink: every parent of an entry is
// checked with Lstat to be a real folder just before it is used (the
// staging folder is this process's own, so nothing changes it between the
// check and the write), and files are created O_EXCL|O_NOFOLLOW.
type tree struct {
	root    string
	lim     Limits
	bytes   int64
	entries int
	// added is what the current layer made: whiteouts hide what lower
	// layers made, never what their own layer did.
	added map[string]bool
	// chown: running as root, files keep the owners the layers give them.
	chown bool
}

func newTree(root string, lim Limits) *tree {
	if lim.MaxEntries <= 0 {
		lim.MaxEntries = DefaultMaxEntries
	}
	return &tree{root: root, lim: lim, chown: os.Geteuid() == 0}
}

// cleanName is an entry's name as a clean relative path ("" for the
// root), or a refusal: absolute names, '..' anywhere, NUL, overlong.
func cleanName(name string) (string, error) {
	if len(name) > maxNameLen {
		return "", refusal("entry_name", "a name of %d bytes (at most %d)", len(name), maxNameLen)
	}
	if strings.HasPrefix(name, "/") {
		return "", refusal("absolute_path", "%q is an absolute path; layer entries are relative to the image root", name)
	}
	if strings.ContainsRune(name, 0) {
		return "", refusal("entry_name", "%q holds a NUL byte", name)
	}
	var out []string
	for _, e := range strings.Split(name, "/") {
		switch e {
		case "", ".":
			continue
		case "..":
			return "", refusal("path_escape", "%q climbs out of the image root with '..'", name)
		}
		if len(e) > maxElemLen {
			return "", refusal("entry_name", "%q has an element over %d bytes", name, maxElemLen)
		}
		out = append(out, e)
	}
	return strings.Join(out, "/"), nil
}

func (t *tree) abs(rel string) string { return filepath.Join(t.root, filepath.FromSlash(rel)) }

// parentDirs checks that every folder above rel is a real folder, making
// missing ones when create is set. It returns false (and no error) when
// one is missing and create is not set.
func (t *tree) parentDirs(rel string, create bool) (bool, error) {
	dir := path.Dir(rel)
	if dir == "." {
		return true, nil
	}
	cur := ""
	for _, e := range strings.Split(dir, "/") {
		cur = path.Join(cur, e)
		fi, err := os.Lstat(t.abs(cur))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if !create {
				return false, nil
			}
			if err := os.Mkdir(t.abs(cur), 0o755); err != nil {
				return false, fmt.Errorf("make folder %s: %w", cur, err)
			}
			t.added[cur] = true
		case err != nil:
			return false, fmt.Errorf("look at %s: %w", cur, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return false, refusal("symlink_parent", "%q lies under %s, a symlink: nothing is written through a symlink", rel, cur)
		case !fi.IsDir():
			return false, refusal("not_a_folder", "%q lies under %s, which is not a folder", rel, cur)
		}
	}
	return true, nil
}

// mode is a header's permission bits without setuid and setgid (nothing
// in a template gains privileges); the sticky bit stays (/tmp).
func mode(hdr *tar.Header) fs.FileMode {
	m := fs.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// apply writes one layer's tar stream into the tree.
func (t *tree) apply(r io.Reader) error {
	t.added = map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return refusal("layer_tar", "not a readable tar: %v", err)
		}
		t.entries++
		if t.entries > t.lim.MaxEntries {
			return refusal("entries", "more than %d entries", t.lim.MaxEntries)
		}
		if err := t.entry(hdr, tr); err != nil {
			return err
		}
	}
}

func (t *tree) entry(hdr *tar.Header, r io.Reader) error {
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	base := path.Base(rel)
	if rel == "" {
		return nil // the root itself: the tree's own folder
	}
	if strings.HasPrefix(base, ".wh.") {
		return t.whiteout(rel, base)
	}
	if _, err := t.parentDirs(rel, true); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return t.dir(rel, hdr)
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return t.file(rel, hdr, r)
	case tar.TypeSymlink:
		return t.symlink(rel, hdr)
	case tar.TypeLink:
		return t.link(rel, hdr)
	case tar.TypeChar, tar.TypeBlock:
		return refusal("device", "%q is a device node; a template may hold none", rel)
	case tar.TypeFifo:
		return refusal("device", "%q is a FIFO; a template may hold none", rel)
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return refusal("entry_type", "%q is of tar type %q, which a layer may not hold", rel, hdr.Typeflag)
	}
}

// replace clears rel for a new entry: a folder stays for a folder (its
// contents merge), anything else goes.
func (t *tree) replace(rel string, keepDir bool) (bool, error) {
	fi, err := os.Lstat(t.abs(rel))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look at %s: %w", rel, err)
	}
	if keepDir && fi.IsDir() {
		return true, nil
	}
	if err := os.RemoveAll(t.abs(rel)); err != nil {
		return false, fmt.Errorf("replace %s: %w", rel, err)
	}
	return false, nil
}

func (t *tree) owner(rel string, hdr *tar.Header) error {
	if !t.chown {
		return nil
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid > 1<<31 || hdr.Gid > 1<<31 {
		return refusal("owner", "%q has owner %d:%d", rel, hdr.Uid, hdr.Gid)
	}
	if err := os.Lchown(t.abs(rel), hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("own %s: %w", rel, err)
	}
	return nil
}

func (t *tree) dir(rel string, hdr *tar.Header) error {
	kept, err := t.replace(rel, true)
	if err != nil {
		return err
	}
	if !kept {
		if err := os.Mkdir(t.abs(rel), 0o700); err != nil {
			return fmt.Errorf("make folder %s: %w", rel, err)
		}
	}
	t.added[rel] = true
	if err := t.owner(rel, hdr); err != nil {
		return err
	}
	// Chmod after chown: chown clears setuid bits anyway, and the folder
	// was made 0700 so nothing reads it half-made.
	if err := os.Chmod(t.abs(rel), mode(hdr)); err != nil {
		return fmt.Errorf("mode of %s: %w", rel, err)
	}
	return nil
}

func (t *tree) file(rel string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size < 0 {
		return refusal("entry_size", "%q has a negative size", rel)
	}
	if t.bytes+hdr.Size > t.lim.MaxBytes {
		return t.overQuota()
	}
	if _, err := t.replace(rel, false); err != nil {
		return err
	}
	f, err := os.OpenFile(t.abs(rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	n, err := io.Copy(f, io.LimitReader(r, hdr.Size))
	cerr := f.Close()
	t.bytes += n
	if err != nil {
		return refusal("layer_tar", "%q: reading it: %v", rel, err)
	}
	if n != hdr.Size {
		return refusal("layer_tar", "%q is cut short (%d of %d bytes)", rel, n, hdr.Size)
	}
	if cerr != nil {
		return fmt.Errorf("write %s: %w", rel, cerr)
	}
	t.added[rel] = true
	if err := t.owner(rel, hdr); err != nil {
		return err
	}
	if err := os.Chmod(t.abs(rel), mode(hdr)); err != nil {
		return fmt.Errorf("mode of %s: %w", rel, err)
	}
	if !hdr.ModTime.IsZero() {
		// A regular file just made here: Chtimes follows no symlink.
		if err := os.Chtimes(t.abs(rel), time.Time{}, hdr.ModTime); err != nil {
			return fmt.Errorf("times of %s: %w", rel, err)
		}
	}
	return nil
}

func (t *tree) overQuota() error {
	q := t.lim.Quota
	if q == "" {
		q = "template storage"
	}
	return &errdefs.QuotaError{Quota: q, Detail: fmt.Sprintf("the image's files pass the %d bytes left for templates", t.lim.MaxBytes)}
}

// checkTarget refuses a symlink target that climbs out of the image root
// from where the link is, read as written (an absolute target starts at
// the image root, as inside a sandbox). Where a target resolves through
// other symlinks is checked once every layer is in place (checkLinks).
func checkTarget(rel, target string) error {
	if target == "" || strings.ContainsRune(target, 0) || len(target) > maxNameLen {
		return refusal("symlink_target", "symlink %q has an empty, overlong or NUL target", rel)
	}
	depth := 0
	if !strings.HasPrefix(target, "/") {
		depth = strings.Count(rel, "/") // the folders above the link
	}
	for _, e := range strings.Split(target, "/") {
		switch e {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return refusal("symlink_escape", "symlink %q -> %q points outside the image root", rel, target)
			}
		default:
			depth++
		}
	}
	return nil
}

func (t *tree) symlink(rel string, hdr *tar.Header) error {
	if err := checkTarget(rel, hdr.Linkname); err != nil {
		return err
	}
	if _, err := t.replace(rel, false); err != nil {
		return err
	}
	if err := os.Symlink(hdr.Linkname, t.abs(rel)); err != nil {
		return fmt.Errorf("symlink %s: %w", rel, err)
	}
	t.added[rel] = true
	return t.owner(rel, hdr)
}

func (t *tree) link(rel string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return refusal("hardlink_target", "hard link %q -> %q: %s", rel, hdr.Linkname, strings.TrimPrefix(err.Error(), "image: "))
	}
	if target == "" || target == rel {
		return refusal("hardlink_target", "hard link %q -> %q names no file", rel, hdr.Linkname)
	}
	ok, err := t.parentDirs(target, false)
	if err != nil {
		return err
	}
	var fi fs.FileInfo
	if ok {
		fi, err = os.Lstat(t.abs(target))
	}
	if !ok || errors.Is(err, fs.ErrNotExist) {
		return refusal("hardlink_target", "hard link %q -> %q: no such file in the image", rel, hdr.Linkname)
	}
	if err != nil {
		return fmt.Errorf("look at %s: %w", target, err)
	}
	if fi.IsDir() {
		return refusal("hardlink_target", "hard link %q -> %q names a folder", rel, hdr.Linkname)
	}
	if _, err := t.replace(rel, false); err != nil {
		return err
	}
	// link(2) does not follow a symlink it is given as the old name.
	if err := os.Link(t.abs(target), t.abs(rel)); err != nil {
		return fmt.Errorf("hard link %s: %w", rel, err)
	}
	t.added[rel] = true
	return nil
}

// whiteout applies ".wh.NAME" (NAME of the lower layers goes) and
// ".wh..wh..opq" (the folder's lower contents go), as the OCI image spec
// says: neither touches what its own layer holds.
func (t *tree) whiteout(rel, base string) error {
	ok, err := t.parentDirs(rel, false)
	if err != nil || !ok {
		return err // nothing below to hide
	}
	dir := path.Dir(rel)
	if dir == "." {
		dir = ""
	}
	if base == ".wh..wh..opq" {
		if dir == "" {
			return t.hideChildren("")
		}
		fi, err := os.Lstat(t.abs(dir))
		if err != nil {
			return fmt.Errorf("look at %s: %w", dir, err)
		}
		if !fi.IsDir() {
			return nil
		}
		return t.hideChildren(dir)
	}
	name := strings.TrimPrefix(base, ".wh.")
	if name == "" || name == "." || name == ".." {
		return refusal("whiteout", "whiteout %q names nothing", rel)
	}
	return t.hide(path.Join(dir, name))
}

// hide removes rel when a lower layer made it; what this layer made stays
// (a folder of this layer loses only its lower contents).
func (t *tree) hide(rel string) error {
	fi, err := os.Lstat(t.abs(rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look at %s: %w", rel, err)
	}
	if !t.added[rel] {
		if err := os.RemoveAll(t.abs(rel)); err != nil {
			return fmt.Errorf("whiteout %s: %w", rel, err)
		}
		return nil
	}
	if fi.IsDir() {
		return t.hideChildren(rel)
	}
	return nil
}

func (t *tree) hideChildren(dir string) error {
	ents, err := os.ReadDir(t.abs(dir))
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range ents {
		if err := t.hide(path.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// checkLinks refuses the tree when one of its symlinks resolves, through
// the others, to somewhere above the image root: inside a sandbox the
// kernel stops '..' at the root, but host code must never meet such a link.
func (t *tree) checkLinks() error {
	return filepath.WalkDir(t.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("check symlinks: %w", err)
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		rel, err := filepath.Rel(t.root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("check symlinks: %w", err)
		}
		hops := 0
		dir := strings.Split(path.Dir(rel), "/")
		if path.Dir(rel) == "." {
			dir = nil
		}
		if _, err := t.resolve(dir, target, &hops); errors.Is(err, errLoop) {
			return refusal("symlink_loop", "symlink %q -> %q: %s", rel, target, err.Error())
		} else if err != nil {
			return refusal("symlink_escape", "symlink %q -> %q: %s", rel, target, err.Error())
		}
		return nil
	})
}

var (
	errEscape = errors.New("resolves outside the image root")
	errLoop   = errors.New("too many levels of symlinks")
)

// resolve walks target from the folder dir (real folders of the tree) and
// returns where it ends, following the tree's symlinks with Lstat and
// Readlink only.
func (t *tree) resolve(dir []string, target string, hops *int) ([]string, error) {
	comps := append([]string(nil), dir...)
	if strings.HasPrefix(target, "/") {
		comps = nil
	}
	for _, e := range strings.Split(target, "/") {
		switch e {
		case "", ".":
			continue
		case "..":
			if len(comps) == 0 {
				return nil, errEscape
			}
			comps = comps[:len(comps)-1]
			continue
		}
		next := append(append([]string(nil), comps...), e)
		p := t.abs(strings.Join(next, "/"))
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			comps = next // a real entry, or nothing (the rest is read as written)
			continue
		}
		*hops++
		if *hops > maxLinkHops {
			return nil, errLoop
		}
		lt, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		if comps, err = t.resolve(comps, lt, hops); err != nil {
			return nil, err
		}
	}
	return comps, nil
}

// realDir makes sure rel is a real folder of the tree, making it (and its
// parents) when missing; a symlink or a file there is refused.
func (t *tree) realDir(rel string, what string) error {
	t.added = map[string]bool{}
	if _, err := t.parentDirs(rel+"/x", true); err != nil {
		return refusal("reserved_path", "%s /%s: %s", what, rel, strings.TrimPrefix(err.Error(), "image: "))
	}
	return nil
}

// checkReserved refuses a tree whose paths that the platform writes or
// reads on the host (the marker, the sandbox user's files and folders)
// are symlinks or of the wrong kind, and makes workdir.
func (t *tree) checkReserved(workdir string) error {
	if err := t.realDir("etc", "the image's"); err != nil {
		return err
	}
	for _, f := range []string{"etc/passwd", "etc/group", "etc/shadow", "etc/gshadow", "etc/stockade-template.json"} {
		fi, err := os.Lstat(t.abs(f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("look at %s: %w", f, err)
		}
		if !fi.Mode().IsRegular() {
			return refusal("reserved_path", "the image's /%s is not a regular file (a symlink or another kind): the platform writes it", f)
		}
	}
	for _, d := range []string{"tmp", "workspace", "home", "home/sandbox"} {
		if err := t.checkDirIfPresent(d); err != nil {
			return err
		}
	}
	if workdir != "" {
		rel, err := cleanName(strings.TrimPrefix(workdir, "/"))
		if err != nil {
			return err
		}
		if rel != "" {
			if err := t.realDir(rel, "working folder"); err != nil {
				return err
			}
			fi, err := os.Lstat(t.abs(rel))
			if errors.Is(err, fs.ErrNotExist) {
				if err := os.Mkdir(t.abs(rel), 0o755); err != nil {
					return fmt.Errorf("make working folder %s: %w", rel, err)
				}
			} else if err != nil || !fi.IsDir() {
				return refusal("reserved_path", "the image's working folder /%s is not a folder", rel)
			}
		}
	}
	return nil
}

func (t *tree) checkDirIfPresent(d string) error {
	if ok, err := t.parentDirs(d, false); err != nil {
		return refusal("reserved_path", "the image's /%s: %s", d, strings.TrimPrefix(err.Error(), "image: "))
	} else if !ok {
		return nil
	}
	fi, err := os.Lstat(t.abs(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look at %s: %w", d, err)
	}
	if !fi.IsDir() {
		return refusal("reserved_path", "the image's /%s is not a folder (a symlink or a file): the platform makes it", d)
	}
	return nil
}

// asRefusal is err's refusal, if it is one.
func asRefusal(err error) *errdefs.FieldError {
	var fe *errdefs.FieldError
	if errors.As(err, &fe) && fe.Field == "image" {
		return fe
	}
	return nil
}
