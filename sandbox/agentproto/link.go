package agentproto

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// The link layer sits between the channel and yamux. A virtio-serial port
// does not tell the guest reliably that its host changed: a host that
// disconnects and another that connects at once (a replica taking over the
// channel, libvirt's FORCE) look like one byte stream, possibly with a frame
// cut in half. So bytes travel in frames that say which host session they
// belong to, delimited so a torn frame never swallows the next one:
//
//	0x00 | COBS(kind uint8 | session uint64 BE | data | crc32c uint32 BE) | 0x00
//
// COBS removes every zero from the frame, so 0x00 only ever delimits; two
// delimiters in a row are an empty frame and skipped. A frame that fails
// its checksum or bounds is dropped. Each host connection starts with
// LinkOpen carrying a fresh random session; the agent then ends its current
// yamux session and serves a new one; frames of any other session are
// dropped by both sides. A host that closes sends LinkClose when it can.
// The port's own "no host" (EOF) never ends a session: the guest may read it
// after the next host's first frames.

// LinkKind says what a link frame carries.
type LinkKind uint8

const (
	// LinkOpen starts a host session (host -> agent).
	LinkOpen LinkKind = 1
	// LinkData carries session bytes (yamux) in either direction.
	LinkData LinkKind = 2
	// LinkClose ends a host session (host -> agent).
	LinkClose LinkKind = 3
)

// StreamWindow is the yamux flow-control window of every stream, both ends
// (yamux's MaxStreamWindowSize; its default is 256 KiB). Under TCG a
// host <-> guest round trip takes 10-20 ms, longer on a loaded host, while
// a stream carries 10-20 MB/s: 256 KiB in flight (a window update goes out
// when half of it is read) left the sender waiting on updates. It is also
// the most a stream buffers for a reader that does not read: a sandbox
// connection that stops reading holds at most this much in the agent.
const StreamWindow = 1 << 20

// MaxLinkData bounds the data of one link frame.
const MaxLinkData = 32 << 10

const (
	linkOverhead = 1 + 8 + 4
	// maxLinkEncoded bounds an encoded frame: COBS adds one byte per 254.
	maxLinkEncoded = MaxLinkData + linkOverhead + (MaxLinkData+linkOverhead)/254 + 2
)

// LinkFrame is one decoded frame.
type LinkFrame struct {
	Kind    LinkKind
	Session uint64
	Data    []byte
}

// AppendLinkFrame appends f, encoded and delimited, to dst.
func AppendLinkFrame(dst []byte, f LinkFrame) []byte {
	dst, _ = appendLinkFrame(dst, nil, f)
	return dst
}

// appendLinkFrame is AppendLinkFrame building the frame's plain bytes in
// scratch (reused by the caller: one allocation less per frame); it returns
// scratch too.
func appendLinkFrame(dst, scratch []byte, f LinkFrame) ([]byte, []byte) {
	raw := scratch[:0]
	raw = append(raw, byte(f.Kind))
	raw = binary.BigEndian.AppendUint64(raw, f.Session)
	raw = append(raw, f.Data...)
	raw = binary.BigEndian.AppendUint32(raw, crc32.Checksum(raw, crc32.MakeTable(crc32.Castagnoli)))
	dst = append(dst, 0)
	dst = cobsEncode(dst, raw)
	return append(dst, 0), raw
}

// cobsEncode appends the COBS encoding of src (no zero bytes) to dst.
func cobsEncode(dst, src []byte) []byte {
	for {
		n := bytes.IndexByte(src, 0)
		if n < 0 {
			n = len(src)
		}
		if n >= 254 {
			dst = append(dst, 0xFF)
			dst = append(dst, src[:254]...)
			src = src[254:]
			continue
		}
		dst = append(dst, byte(n+1))
		dst = append(dst, src[:n]...)
		if n == len(src) {
			return dst
		}
		src = src[n+1:]
	}
}

var errCOBS = errors.New("bad COBS encoding")

// cobsDecodeInPlace decodes the COBS bytes b over themselves (the decoding
// is never longer than what it has read so far) and returns the decoded
// prefix of b: no buffer, no allocation, one pass.
func cobsDecodeInPlace(b []byte) ([]byte, error) {
	w, r := 0, 0
	for r < len(b) {
		code := int(b[r])
		if code == 0 || code > len(b)-r {
			return nil, errCOBS
		}
		w += copy(b[w:], b[r+1:r+code])
		r += code
		if code != 0xFF && r < len(b) {
			b[w] = 0
			w++
		}
	}
	return b[:w], nil
}

// LinkReader decodes frames from a byte stream, skipping whatever does not
// decode (torn frames, a previous session's leftovers).
type LinkReader struct {
	br      *bufio.Reader
	dropped int
}

// NewLinkReader reads frames from r.
func NewLinkReader(r io.Reader) *LinkReader {
	return &LinkReader{br: bufio.NewReaderSize(r, maxLinkEncoded+64)}
}

// Dropped counts frames skipped as damaged or oversized.
func (r *LinkReader) Dropped() int { return r.dropped }

// Next returns the next valid frame. Errors are the underlying reader's; an
// io.EOF leaves the reader usable (a virtio-serial port reads EOF while no
// host is connected). The frame's Data is valid until the next call: a
// frame is decoded where it was read, in the reader's buffer (under TCG an
// allocation or a copy per frame costs more than checking it; a buffer
// grown by appends while decoding allocated 150 KB per 32 KiB frame).
func (r *LinkReader) Next() (LinkFrame, error) {
	for {
		enc, err := r.br.ReadSlice(0)
		if errors.Is(err, bufio.ErrBufferFull) {
			// Over the bound: drop everything up to the next delimiter.
			r.dropped++
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.br.ReadSlice(0)
			}
			if err != nil {
				return LinkFrame{}, err
			}
			continue
		}
		if err != nil {
			// A partial frame stays buffered in br; the next delimiter ends it.
			return LinkFrame{}, err
		}
		enc = enc[:len(enc)-1]
		if len(enc) == 0 {
			continue
		}
		raw, derr := cobsDecodeInPlace(enc)
		if derr != nil || len(raw) < linkOverhead {
			r.dropped++
			continue
		}
		body, sum := raw[:len(raw)-4], binary.BigEndian.Uint32(raw[len(raw)-4:])
		if crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)) != sum || len(body)-9 > MaxLinkData {
			r.dropped++
			continue
		}
		return LinkFrame{Kind: LinkKind(body[0]), Session: binary.BigEndian.Uint64(body[1:9]), Data: body[9:]}, nil
	}
}

// LinkWriter frames writes for one session; Write is safe for concurrent use
// and never interleaves two frames.
type LinkWriter struct {
	mu      *sync.Mutex
	w       io.Writer
	session uint64
	// enc and raw are reused under mu: the encoded frames of one Write and
	// one frame's plain bytes.
	enc, raw []byte
}

// maxLinkScratch bounds the encoding buffer a LinkWriter keeps between
// writes; a larger write's buffer is dropped after it.
const maxLinkScratch = 256 << 10

// NewLinkWriter writes session's frames to w; writers sharing w must share mu.
func NewLinkWriter(w io.Writer, mu *sync.Mutex, session uint64) *LinkWriter {
	return &LinkWriter{mu: mu, w: w, session: session}
}

// Write sends p as data frames, in one write to the channel.
func (lw *LinkWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	buf := lw.enc[:0]
	for rest := p; len(rest) > 0; {
		n := min(len(rest), MaxLinkData)
		buf, lw.raw = appendLinkFrame(buf, lw.raw, LinkFrame{Kind: LinkData, Session: lw.session, Data: rest[:n]})
		rest = rest[n:]
	}
	err := lw.sendLocked(buf)
	if cap(buf) <= maxLinkScratch {
		lw.enc = buf
	}
	if cap(lw.raw) > maxLinkScratch {
		lw.raw = nil
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Control sends a frame without data (LinkOpen, LinkClose).
func (lw *LinkWriter) Control(kind LinkKind) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.sendLocked(AppendLinkFrame(nil, LinkFrame{Kind: kind, Session: lw.session}))
}

func (lw *LinkWriter) sendLocked(b []byte) error {
	if _, err := lw.w.Write(b); err != nil {
		return fmt.Errorf("write link frame: %w", err)
	}
	return nil
}

// NewLinkSession returns a random session id.
func NewLinkSession() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// hostLink is the host's end of one session over the channel: what yamux
// runs on.
type hostLink struct {
	conn    io.ReadWriteCloser
	w       *LinkWriter
	session uint64
	pr      *io.PipeReader
	once    sync.Once
	// silent: Close says no goodbye (Client.Drop).
	silent atomic.Bool
}

// newHostLink opens a session on conn: it announces a new session id and
// from then on reads only that session's frames.
func newHostLink(conn io.ReadWriteCloser) (*hostLink, error) {
	session := NewLinkSession()
	pr, pw := io.Pipe()
	l := &hostLink{conn: conn, w: NewLinkWriter(conn, &sync.Mutex{}, session), session: session, pr: pr}
	if err := l.w.Control(LinkOpen); err != nil {
		return nil, fmt.Errorf("open link session: %w", err)
	}
	go func() {
		lr := NewLinkReader(conn)
		for {
			f, err := lr.Next()
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if f.Session != session || f.Kind != LinkData {
				continue // an earlier session's leftovers
			}
			if _, err := pw.Write(f.Data); err != nil {
				return
			}
		}
	}()
	return l, nil
}

func (l *hostLink) Read(p []byte) (int, error)  { return l.pr.Read(p) }
func (l *hostLink) Write(p []byte) (int, error) { return l.w.Write(p) }

// Close tells the agent the session is over (best effort, briefly) and
// closes the channel.
func (l *hostLink) Close() error {
	var err error
	l.once.Do(func() {
		// Only a channel that can bound the write gets the courtesy: a
		// blocked write must not hold up Close.
		if dl, ok := l.conn.(interface{ SetWriteDeadline(time.Time) error }); ok && !l.silent.Load() {
			if dl.SetWriteDeadline(time.Now().Add(100*time.Millisecond)) == nil {
				l.w.Control(LinkClose)
			}
		}
		l.pr.Close()
		err = l.conn.Close()
	})
	return err
}
