package agent

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"testing/iotest"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// chunkReader returns its data in reads of the given sizes, in turn.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
	err   error // after the data
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := min(len(p), r.sizes[r.i%len(r.sizes)], len(r.data))
	r.i++
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func TestCopyBatched(t *testing.T) {
	data := make([]byte, 3<<20+12345)
	rand.NewChaCha8([32]byte{9}).Read(data)
	boom := errors.New("boom")
	tests := []struct {
		name    string
		src     func() io.Reader
		wantErr error
	}{
		{"frames", func() io.Reader { return &chunkReader{data: data, sizes: []int{32751}, err: io.EOF} }, nil},
		{"odd sizes", func() io.Reader { return &chunkReader{data: data, sizes: []int{1, 5000, 32768, 7}, err: io.EOF} }, nil},
		{"one byte at a time", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data[:70000])) }, nil},
		{"data then error", func() io.Reader { return &chunkReader{data: data, sizes: []int{32751}, err: boom} }, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, r := tcpPair(t)
			src := tt.src()
			want := data
			if tt.name == "one byte at a time" {
				want = data[:70000]
			}
			got := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(r)
				got <- b
			}()
			err := copyBatched(w, src)
			w.CloseWrite()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Got(copyBatched) = %v; want %v", err, tt.wantErr)
			}
			if b := <-got; !bytes.Equal(b, want) {
				t.Fatalf("Got(%d bytes, equal %v); want the %d bytes in order", len(b), bytes.Equal(b, want), len(want))
			}
		})
	}
}

// A write that fails (the sandbox went away) ends the copy with its error
// while the source still has data.
func TestCopyBatchedWriteError(t *testing.T) {
	w, r := tcpPair(t)
	r.SetLinger(0)
	r.Close()
	src := &chunkReader{data: make([]byte, 64<<20), sizes: []int{32751}, err: io.EOF}
	if err := copyBatched(w, src); err == nil {
		t.Fatalf("Got(copyBatched to a reset connection) = nil; want the write's error")
	}
}
