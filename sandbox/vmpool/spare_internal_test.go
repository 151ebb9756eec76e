package vmpool

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestSparseCopy: sparseCopy copies a sparse file byte for byte, keeping
// its holes, and its sum is the same for the copy, and another for a file
// that differs in one byte or in its size.
func TestSparseCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 5 << 20, 5<<20 + sparseChunk - 3, 40 << 20, size - 13} {
		if _, err := f.WriteAt([]byte("stockade-data"), off); err != nil {
			t.Fatal(err)
		}
	}
	// An allocated run of zeros (like the XFS log mkfs writes).
	if _, err := f.WriteAt(make([]byte, 2<<20), 20<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	want = want[:size]

	dst := filepath.Join(dir, "dst")
	sum, n, err := sparseCopy(src, dst)
	if err != nil || n != size {
		t.Fatalf("sparseCopy = %d, %v; want %d bytes", n, err, int64(size))
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Got(copy) differs from the source")
	}
	if again, _, err := sparseCopy(dst, ""); err != nil || again != sum {
		t.Errorf("Got(sum of the copy) = %s, %v; want %s (the source's)", again, err, sum)
	}
	st, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if du := st.Sys().(*syscall.Stat_t).Blocks * 512; du > 1<<20 {
		t.Errorf("Got(copy's disk use) = %d bytes; want the holes and zero runs left out (< 1 MiB)", du)
	}

	flipped := slices.Clone(want)
	flipped[40<<20] ^= 1
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := sparseCopy(other, ""); s == sum {
		t.Errorf("Got(sum of a file one byte off) = the same; want another")
	}
	if err := os.Truncate(other, size+4096); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, want, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(other, size+4096); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := sparseCopy(other, ""); s == sum {
		t.Errorf("Got(sum of a longer file) = the same; want another")
	}
}
