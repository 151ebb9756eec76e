package hypervisortest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWriteCPIO checks our newc writer against GNU cpio, the reference reader.
func TestWriteCPIO(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		Unavailable(t, "cpio is not installed")
	}
	entries := []cpioEntry{
		{Name: "init", Mode: modeFile | 0o755, Data: []byte("#!/bin/sh\necho hi\n")},
		{Name: "bin", Mode: modeDir | 0o755},
		{Name: "bin/odd", Mode: modeFile | 0o644, Data: []byte("12345")}, // length not a multiple of 4
		{Name: "dev", Mode: modeDir | 0o755},
		{Name: "dev/console", Mode: modeChar | 0o600, Major: 5, Minor: 1},
		{Name: "empty", Mode: modeFile | 0o644},
	}
	var buf bytes.Buffer
	if err := writeCPIO(&buf, entries); err != nil {
		t.Fatalf("writeCPIO() error = %v", err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d; want a multiple of 4", buf.Len())
	}

	list := exec.Command("cpio", "-it", "--quiet")
	list.Stdin = bytes.NewReader(buf.Bytes())
	out, err := list.Output()
	if err != nil {
		t.Fatalf("cpio -it: %v", err)
	}
	got := strings.Fields(string(out))
	want := []string{"bin", "bin/odd", "dev", "dev/console", "empty", "init"}
	if !slices.Equal(got, want) {
		t.Errorf("cpio -it = %v; want %v (parents first, sorted)", got, want)
	}

	dir := t.TempDir()
	extract := exec.Command("cpio", "-id", "--quiet", "--no-absolute-filenames")
	extract.Dir = dir
	extract.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := extract.CombinedOutput(); err != nil {
		t.Fatalf("cpio -id: %v: %s", err, out)
	}
	for _, e := range entries {
		if e.Mode&0o170000 != modeFile {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name))
		if err != nil || !bytes.Equal(data, e.Data) {
			t.Errorf("extracted %s = %q, %v; want %q", e.Name, data, err, e.Data)
		}
		fi, _ := os.Stat(filepath.Join(dir, e.Name))
		if fi != nil && uint32(fi.Mode().Perm()) != e.Mode&0o777 {
			t.Errorf("extracted %s mode = %o; want %o", e.Name, fi.Mode().Perm(), e.Mode&0o777)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "dev/console"))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("extracted dev/console = %v, %v; want a char device", fi, err)
	}
}
