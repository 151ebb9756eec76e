package hypervisortest

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// cpioEntry is one member of an initramfs.
type cpioEntry struct {
	Name         string // without leading slash
	Mode         uint32 // type bits included (0o040000 dir, 0o100000 file, 0o020000 char dev)
	Data         []byte
	Major, Minor uint32 // device numbers for char devices
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeChar = 0o020000
)

// writeCPIO writes entries as an uncompressed "newc" archive, the format the
// kernel unpacks as initramfs. Entries are sorted so parents come first and
// the output is reproducible.
func writeCPIO(w io.Writer, entries []cpioEntry) error {
	sorted := append([]cpioEntry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	ino := uint32(1)
	for _, e := range sorted {
		if err := writeCPIOEntry(w, ino, e); err != nil {
			return fmt.Errorf("write cpio %s: %w", e.Name, err)
		}
		ino++
	}
	return writeCPIOEntry(w, 0, cpioEntry{Name: "TRAILER!!!"})
}

func writeCPIOEntry(w io.Writer, ino uint32, e cpioEntry) error {
	name := strings.TrimPrefix(e.Name, "/")
	nlink := uint32(1)
	if e.Mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, e.Mode, 0, 0, nlink, 0, len(e.Data), 0, 0, e.Major, e.Minor, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr); err != nil {
		return err
	}
	if _, err := io.WriteString(w, name+"\x00"); err != nil {
		return err
	}
	if err := pad(w, len(hdr)+len(name)+1); err != nil {
		return err
	}
	if _, err := w.Write(e.Data); err != nil {
		return err
	}
	return pad(w, len(e.Data))
}

// pad aligns to 4 bytes, as newc requires after the name and after the data.
func pad(w io.Writer, n int) error {
	if r := n % 4; r != 0 {
		_, err := w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
