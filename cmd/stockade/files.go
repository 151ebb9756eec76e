package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/stockade-dev/stockade/handlers/api"
)

// The CLI side of the native file API: `sandbox ls ID:PATH`, `mkdir`,
// `mv`, `rm ID:PATH` and folders in `cp` (a tar out, a multipart upload
// in).

// remotePath splits ID:PATH.
func remotePath(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	return id, p, ok && id != "" && p != "" && !strings.Contains(id, "/")
}

func filesURL(id, op string, q url.Values) string {
	u := "/api/v1/sandboxes/" + url.PathEscape(id) + "/files"
	if op != "" {
		u += "/" + op
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// remoteStat reports the entry at ID:PATH.
func remoteStat(ctx context.Context, c *apiClient, id, p string) (api.FileEntry, error) {
	var e api.FileEntry
	err := c.json(ctx, "GET", filesURL(id, "stat", url.Values{"path": {p}}), nil, &e)
	return e, err
}

// sandboxListFiles is `sandbox ls [--depth N] [--json] ID:PATH`.
func sandboxListFiles(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("sandbox ls", flag.ContinueOnError)
	fset.SetOutput(stderr)
	depth := fset.Int("depth", 1, "how deep: 1 lists the folder's own entries")
	asJSON := fset.Bool("json", false, "print the answer as JSON")
	if err := fset.Parse(args); err != nil {
		return exitError(2)
	}
	id, p, ok := remotePath(fset.Arg(0))
	if fset.NArg() != 1 || !ok {
		fmt.Fprintln(stderr, "usage: stockade sandbox ls [--depth N] [--json] ID:PATH")
		return exitError(2)
	}
	var l api.FileList
	if err := c.json(ctx, "GET", filesURL(id, "list", url.Values{"path": {p}, "depth": {fmt.Sprint(*depth)}}), nil, &l); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(l)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 1, ' ', tabwriter.AlignRight)
	for _, e := range l.Entries {
		name := e.Path
		if e.SymlinkTarget != "" {
			name += " -> " + e.SymlinkTarget
		}
		fmt.Fprintf(tw, "%s\t %s\t %s\t %d\t %s\t %s\t\n", e.Permissions, e.Owner, e.Group, e.Size, e.ModifiedAt, name)
	}
	if l.Truncated {
		fmt.Fprintln(stderr, "stockade sandbox ls: the listing was cut at 10000 entries")
	}
	return tw.Flush()
}

// sandboxMakeDir is `sandbox mkdir [--mode M] ID:PATH...` (parents made).
func sandboxMakeDir(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("sandbox mkdir", flag.ContinueOnError)
	fset.SetOutput(stderr)
	mode := fset.String("mode", "", "permission bits in octal (default 0755)")
	if err := fset.Parse(args); err != nil {
		return exitError(2)
	}
	if fset.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: stockade sandbox mkdir [--mode M] ID:PATH...")
		return exitError(2)
	}
	var errs []error
	for _, a := range fset.Args() {
		id, p, ok := remotePath(a)
		if !ok {
			errs = append(errs, fmt.Errorf("mkdir %s: not ID:PATH", a))
			continue
		}
		var out api.MadeDir
		if err := c.json(ctx, "POST", filesURL(id, "mkdir", nil), api.MakeDir{Path: p, Mode: *mode}, &out); err != nil {
			errs = append(errs, fmt.Errorf("mkdir %s: %w", a, err))
			continue
		}
		fmt.Fprintln(stdout, out.Entry.Path)
	}
	return errors.Join(errs...)
}

// sandboxMove is `sandbox mv ID:SRC [ID:]DST` (within one sandbox).
func sandboxMove(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "usage: stockade sandbox mv ID:SRC [ID:]DST")
		return exitError(2)
	}
	id, src, ok := remotePath(args[0])
	if !ok {
		fmt.Fprintln(stderr, "usage: stockade sandbox mv ID:SRC [ID:]DST")
		return exitError(2)
	}
	dst := args[1]
	if did, dp, ok := remotePath(dst); ok {
		if did != id {
			return fmt.Errorf("mv: %s and %s are different sandboxes; mv moves within one", id, did)
		}
		dst = dp
	}
	var e api.FileEntry
	if err := c.json(ctx, "POST", filesURL(id, "move", nil), api.MoveFile{Source: src, Destination: dst}, &e); err != nil {
		return fmt.Errorf("mv: %w", err)
	}
	fmt.Fprintln(stdout, e.Path)
	return nil
}

// sandboxRemoveFiles is `sandbox rm [-r] ID:PATH...`.
func sandboxRemoveFiles(ctx context.Context, c *apiClient, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("sandbox rm", flag.ContinueOnError)
	fset.SetOutput(stderr)
	rec := fset.Bool("r", false, "remove folders with what they hold")
	if err := fset.Parse(args); err != nil {
		return exitError(2)
	}
	var errs []error
	for _, a := range fset.Args() {
		id, p, ok := remotePath(a)
		if !ok {
			errs = append(errs, fmt.Errorf("rm %s: not ID:PATH (files and sandboxes are not removed in one command)", a))
			continue
		}
		q := url.Values{"path": {p}}
		if *rec {
			q.Set("recursive", "true")
		}
		if err := c.json(ctx, "DELETE", filesURL(id, "", q), nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("rm %s: %w", a, err))
			continue
		}
		fmt.Fprintln(stdout, a)
	}
	return errors.Join(errs...)
}

// isFileArgs reports whether rm's arguments name files (ID:PATH or -r)
// rather than sandboxes.
func isFileArgs(args []string) bool {
	for _, a := range args {
		if a == "-r" || strings.Contains(a, ":") {
			return true
		}
	}
	return false
}

// copyDirIn uploads the local folder dir's contents into the folder p of
// sandbox id (made if missing): its folders first, then its files in one
// streamed multipart request. Symlinks and special files are left out.
func copyDirIn(ctx context.Context, c *apiClient, dir, id, p, mode string, stderr io.Writer) error {
	var dirs, files []string
	err := filepath.WalkDir(dir, func(lp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, lp)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			dirs = append(dirs, rel)
		case d.Type().IsRegular():
			files = append(files, rel)
		default:
			fmt.Fprintf(stderr, "stockade sandbox cp: %s is not a file or folder: left out\n", lp)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	for _, d := range dirs {
		target := p
		if d != "." {
			target = strings.TrimSuffix(p, "/") + "/" + d
		}
		if err := c.json(ctx, "POST", filesURL(id, "mkdir", nil), api.MakeDir{Path: target}, nil); err != nil {
			return fmt.Errorf("cp: mkdir %s: %w", target, err)
		}
	}
	// One streamed multipart request per file mode (the local files'
	// modes, unless --mode is given).
	byMode := map[string][]string{}
	var modes []string
	for _, rel := range files {
		m := mode
		if m == "" {
			fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
			if err != nil {
				return fmt.Errorf("cp: %w", err)
			}
			m = fmt.Sprintf("%o", fi.Mode().Perm())
		}
		if _, ok := byMode[m]; !ok {
			modes = append(modes, m)
		}
		byMode[m] = append(byMode[m], rel)
	}
	for _, m := range modes {
		if err := uploadFiles(ctx, c, dir, byMode[m], id, p, m); err != nil {
			return err
		}
	}
	return nil
}

// uploadFiles sends the local files (relative to dir) into the folder p of
// sandbox id in one streamed multipart request, with mode.
func uploadFiles(ctx context.Context, c *apiClient, dir string, files []string, id, p, mode string) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(func() error {
			for _, rel := range files {
				f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
				if err != nil {
					return err
				}
				w, err := mw.CreateFormFile("file", rel)
				if err == nil {
					_, err = io.Copy(w, f)
				}
				f.Close()
				if err != nil {
					return err
				}
			}
			return mw.Close()
		}())
	}()
	resp, err := c.do(ctx, "POST", filesURL(id, "", url.Values{"path": {p}, "mode": {mode}}), pr, mw.FormDataContentType())
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer resp.Body.Close()
	var up api.Uploaded
	if err := json.NewDecoder(resp.Body).Decode(&up); err != nil {
		return fmt.Errorf("cp: decode the answer: %w", err)
	}
	if len(up.Files) != len(files) {
		return fmt.Errorf("cp: the server wrote %d of %d files", len(up.Files), len(files))
	}
	return nil
}

// copyDirOut downloads the folder p of sandbox id as a tar and unpacks it
// into the local folder dst (made if missing).
func copyDirOut(ctx context.Context, c *apiClient, id, p, dst string) error {
	resp, err := c.do(ctx, "GET", filesURL(id, "archive", url.Values{"path": {p}}), nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	if err := extractTar(resp.Body, dst); err != nil {
		return fmt.Errorf("cp: %w (the transfer may have been cut short)", err)
	}
	return nil
}

// extractTar unpacks r into dest: names must stay below it, and nothing is
// written through a link (every folder on the way must be a real folder
// below dest), whatever the archive holds.
func extractTar(r io.Reader, dest string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("the archive names %q, outside the destination", h.Name)
		}
		if err := realFolders(dest, path.Dir(name)); err != nil {
			return err
		}
		target := filepath.Join(dest, filepath.FromSlash(name))
		perm := fs.FileMode(h.Mode) & fs.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, perm|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if fi, err := os.Lstat(target); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s is in the way of a folder", target)
			}
		case tar.TypeReg:
			if err := removeNonDir(target); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := removeNonDir(target); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		}
	}
}

// realFolders makes rel's folders below dest, refusing any that is not a
// real folder (a link, a file).
func realFolders(dest, rel string) error {
	if rel == "." {
		return nil
	}
	cur := dest
	for _, el := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, el)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case !fi.IsDir():
			return fmt.Errorf("%s is not a folder (a link?): refusing to write below it", cur)
		}
	}
	return nil
}

// removeNonDir removes what is at p, unless it is a folder.
func removeNonDir(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a folder in the way of a file", p)
	}
	return os.Remove(p)
}
