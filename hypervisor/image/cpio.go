package image

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// cpioEntry is one file of an archive. Exactly one of Data (a regular
// file), Link (a symlink) or Dir/Char is set.
type cpioEntry struct {
	Name  string // relative, no leading slash
	Mode  fs.FileMode
	UID   int
	GID   int
	Data  []byte
	Link  string
	Dir   bool
	Char  bool // a character device Major:Minor
	Major uint32
	Minor uint32
}

// cpioArchive collects entries and writes them as an uncompressed newc
// archive (what the kernel unpacks as initramfs), in path order with every
// parent folder first, all times zero, so equal inputs give equal bytes.
type cpioArchive struct {
	entries map[string]cpioEntry
}

func newCPIOArchive() *cpioArchive {
	return &cpioArchive{entries: map[string]cpioEntry{}}
}

func (a *cpioArchive) add(e cpioEntry) error {
	e.Name = strings.TrimPrefix(path.Clean("/"+e.Name), "/")
	if e.Name == "" {
		return fmt.Errorf("cpio: empty name")
	}
	if old, ok := a.entries[e.Name]; ok && !(old.Dir && e.Dir) {
		return fmt.Errorf("cpio: %s added twice", e.Name)
	}
	for dir := path.Dir(e.Name); dir != "."; dir = path.Dir(dir) {
		if old, ok := a.entries[dir]; ok {
			if !old.Dir {
				return fmt.Errorf("cpio: %s is not a folder (adding %s)", dir, e.Name)
			}
			continue
		}
		a.entries[dir] = cpioEntry{Name: dir, Dir: true, Mode: 0o755}
	}
	a.entries[e.Name] = e
	return nil
}

func (a *cpioArchive) dir(name string, mode fs.FileMode) error {
	return a.add(cpioEntry{Name: name, Dir: true, Mode: mode})
}

func (a *cpioArchive) file(name string, mode fs.FileMode, data []byte) error {
	return a.add(cpioEntry{Name: name, Mode: mode, Data: data})
}

func (a *cpioArchive) symlink(name, target string) error {
	return a.add(cpioEntry{Name: name, Mode: 0o777, Link: target})
}

func (a *cpioArchive) WriteTo(w io.Writer) (int64, error) {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	// Sorting by path puts "a" before "a/b": parents come first.
	sort.Strings(names)
	cw := &countingWriter{w: bufio.NewWriterSize(w, 1<<20)}
	for i, n := range names {
		if err := writeCPIOEntry(cw, a.entries[n], uint32(i+1)); err != nil {
			return cw.n, err
		}
	}
	if err := writeCPIOEntry(cw, cpioEntry{Name: "TRAILER!!!"}, 0); err != nil {
		return cw.n, err
	}
	if err := cw.w.(*bufio.Writer).Flush(); err != nil {
		return cw.n, fmt.Errorf("write cpio: %w", err)
	}
	return cw.n, nil
}

const (
	cpioTypeDir     = 0o040000
	cpioTypeFile    = 0o100000
	cpioTypeSymlink = 0o120000
	cpioTypeChar    = 0o020000
)

func writeCPIOEntry(w io.Writer, e cpioEntry, ino uint32) error {
	mode := uint32(e.Mode.Perm())
	if e.Mode&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if e.Mode&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if e.Mode&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	data := e.Data
	nlink := uint32(1)
	var rmaj, rmin uint32
	switch {
	case e.Name == "TRAILER!!!":
		mode = 0
	case e.Dir:
		mode |= cpioTypeDir
		nlink = 2
	case e.Link != "":
		mode |= cpioTypeSymlink
		data = []byte(e.Link)
	case e.Char:
		mode |= cpioTypeChar
		rmaj, rmin = e.Major, e.Minor
	default:
		mode |= cpioTypeFile
	}
	name := e.Name + "\x00"
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, e.UID, e.GID, nlink, 0, len(data), 0, 0, rmaj, rmin, len(name), 0)
	if _, err := io.WriteString(w, hdr+name); err != nil {
		return fmt.Errorf("write cpio %s: %w", e.Name, err)
	}
	if err := pad4(w, len(hdr)+len(name)); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("write cpio %s: %w", e.Name, err)
	}
	return pad4(w, len(data))
}

func pad4(w io.Writer, n int) error {
	if r := n % 4; r != 0 {
		if _, err := w.Write(make([]byte, 4-r)); err != nil {
			return fmt.Errorf("write cpio padding: %w", err)
		}
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
