package terminal

// ring keeps the last len(buf) bytes of a stream and where they sit in it:
// offsets count every byte the stream ever produced, so a client that saw
// up to offset n can be sent exactly what came after, as long as it is
// still held.
type ring struct {
	buf  []byte
	base int64 // offset of the first byte ever written here
	end  int64 // offset just past the last byte written
}

func newRing(size int) *ring { return &ring{buf: make([]byte, size)} }

// newRingAt is a ring whose first byte sits at offset base of the stream
// (a stream taken up again part way).
func newRingAt(size int, base int64) *ring {
	return &ring{buf: make([]byte, size), base: base, end: base}
}

// start is the offset of the oldest byte still held.
func (r *ring) start() int64 { return max(r.base, r.end-int64(len(r.buf))) }

// write appends p, overwriting the oldest bytes.
func (r *ring) write(p []byte) {
	size := int64(len(r.buf))
	if int64(len(p)) > size {
		r.end += int64(len(p)) - size
		p = p[int64(len(p))-size:]
	}
	pos := r.end % size
	n := copy(r.buf[pos:], p)
	copy(r.buf, p[n:])
	r.end += int64(len(p))
}

// since returns a copy of the bytes from offset off to the end, and the
// offset they start at: later than off when the bytes from off on were
// overwritten already. An offset beyond the end gives nothing at the end.
func (r *ring) since(off int64) ([]byte, int64) {
	from := min(max(off, r.start()), r.end)
	n := r.end - from
	out := make([]byte, n)
	if n == 0 {
		return out, from
	}
	size := int64(len(r.buf))
	pos := from % size
	k := copy(out, r.buf[pos:min(size, pos+n)])
	copy(out[k:], r.buf[:n-int64(k)])
	return out, from
}
