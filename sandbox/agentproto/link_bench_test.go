package agentproto_test

import (
	"bytes"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// The link's per-byte costs, one by one: run them inside a TCG guest (the
// test binary is static) to see what a byte of a download costs the agent
// there, beside the copies and the loopback TCP it adds.

func randomFrameData(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{3}).Read(b)
	return b
}

func BenchmarkLinkEncode(b *testing.B) {
	data := randomFrameData(agentproto.MaxLinkData)
	b.SetBytes(int64(len(data)))
	w := agentproto.NewLinkWriter(io.Discard, &sync.Mutex{}, 1)
	for b.Loop() {
		if _, err := w.Write(data); err != nil {
			b.Fatal(err)
		}
	}
}

// loopReader replays one encoded stream forever.
type loopReader struct {
	b   []byte
	off int
}

func (r *loopReader) Read(p []byte) (int, error) {
	if r.off == len(r.b) {
		r.off = 0
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func BenchmarkLinkDecode(b *testing.B) {
	data := randomFrameData(agentproto.MaxLinkData)
	enc := agentproto.AppendLinkFrame(nil, agentproto.LinkFrame{Kind: agentproto.LinkData, Session: 1, Data: data})
	lr := agentproto.NewLinkReader(&loopReader{b: bytes.Repeat(enc, 8)})
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if f, err := lr.Next(); err != nil || len(f.Data) != len(data) {
			b.Fatalf("Got(Next()) = %d bytes, %v; want %d", len(f.Data), err, len(data))
		}
	}
}

func BenchmarkCRC32C(b *testing.B) {
	data := randomFrameData(agentproto.MaxLinkData)
	tab := crc32.MakeTable(crc32.Castagnoli)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		crc32.Checksum(data, tab)
	}
}

func BenchmarkCopy32K(b *testing.B) {
	src, dst := randomFrameData(32<<10), make([]byte, 32<<10)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkLoopbackTCP: 32 KiB writes over a loopback TCP connection to a
// reader in the same process (what the agent's write to a sandbox's
// proxy connection costs, without the reader being another process).
func BenchmarkLoopbackTCP(b *testing.B) {
	for _, n := range []int{32 << 10, 128 << 10} {
		b.Run(strconv.Itoa(n>>10)+"KiB", func(b *testing.B) { benchLoopback(b, n) })
	}
}

func benchLoopback(b *testing.B, loopbackWrite int) {
	// STOCKADE_BENCH_SINK names a listener of another process to write to
	// (in a guest: busybox nc -l -p PORT > /dev/null, as a sandbox's wget
	// reads); without it the reader is a goroutine here.
	addr := os.Getenv("STOCKADE_BENCH_SINK")
	if addr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.Copy(io.Discard, c)
			c.Close()
		}()
		addr = ln.Addr().String()
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	data := randomFrameData(loopbackWrite)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := c.Write(data); err != nil {
			b.Fatal(err)
		}
	}
}
