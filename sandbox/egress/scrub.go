package egress

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// Response scrubbing. Whatever an intercepted host answers (status line,
// headers, body, trailers) is searched for the real value of every live
// secret of the tenant, and each one found is rewritten to the sandbox's
// placeholder before the sandbox reads it: an upstream that echoes a
// request (an error page quoting it, a created issue, an LLM asked to
// repeat it) does not hand the sandbox the value. The value is found
// verbatim, URL- and JSON-escaped, and base64-encoded at any alignment
// (an echoed Basic header gets the sandbox's own credentials back).
//
// The body is scrubbed as it streams: a value split across reads or chunks
// is held back only as long as the bytes seen so far could be the start of
// one, so a server-sent event stream is not delayed. A gzip body is
// decompressed, scrubbed and compressed again (the sandbox sees the
// encoding it asked for); the gateway asks upstream for gzip or identity
// only, and any other Content-Encoding is refused (502), since it cannot
// be searched.

// pattern is one form of a secret value and what replaces it.
type pattern struct {
	from, to []byte
	name     string // the secret's name, for counting
}

// minEncodedLen: a base64 fragment shorter than this is not searched for
// (too likely to occur by chance in other base64 data).
const minEncodedLen = 8

// MinScrubbedLen is the shortest secret value searched for in responses:
// a shorter one would match ordinary text everywhere (and is guessed in
// moments anyway).
const MinScrubbedLen = 6

// secretPatterns lists the forms of value the responses are scrubbed of,
// each rewritten to the matching form of placeholder.
func secretPatterns(name, value, placeholder string) []pattern {
	if len(value) < MinScrubbedLen {
		return nil
	}
	out := []pattern{{from: []byte(value), to: []byte(placeholder), name: name}}
	add := func(from, to string) {
		if from != value && len(from) > 0 {
			out = append(out, pattern{from: []byte(from), to: []byte(to), name: name})
		}
	}
	add(url.QueryEscape(value), url.QueryEscape(placeholder))
	add(url.PathEscape(value), url.PathEscape(placeholder))
	add(jsonEscape(value, true), placeholder)
	add(jsonEscape(value, false), placeholder)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for off := range 3 {
			if f := base64Fragment(enc, off, value); len(f) >= minEncodedLen {
				add(f, base64Fragment(enc, off, placeholder))
			}
		}
	}
	return out
}

// jsonEscape is s as inside a JSON string.
func jsonEscape(s string, html bool) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(html)
	_ = e.Encode(s) // a string always encodes
	return strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(b.String(), `"`), "\n"), `"`)
}

// base64Fragment is the part of the encoding of s, preceded by off bytes of
// anything, that depends on s alone: whole 3-byte groups of s only.
func base64Fragment(enc *base64.Encoding, off int, s string) string {
	lead := (3 - off) % 3 // bytes of s completing the group it starts in
	if len(s) <= lead {
		return ""
	}
	body := s[lead:]
	body = body[:len(body)/3*3]
	return strings.TrimRight(enc.EncodeToString([]byte(body)), "=")
}

// matcher finds patterns, longest first at each position. Most positions
// are passed over by two bit tests: the sets of first two and (hashed)
// first three bytes of the patterns.
type matcher struct {
	pats    []pattern
	byFirst [256][]int // pattern indexes by first byte, longest first
	// two and three mark the first bytes of the patterns of three bytes or
	// more, byTwo indexes those; short lists the shorter ones.
	two, three [1 << 16 / 64]uint64
	byTwo      map[uint16][]int
	short      [256][]int
}

func bit(set *[1 << 16 / 64]uint64, k uint16) bool { return set[k/64]&(1<<(k%64)) != 0 }

func key3(b []byte) uint16 { return uint16(b[0])*31*31 + uint16(b[1])*31 + uint16(b[2]) }

func newMatcher(pats ...[]pattern) *matcher {
	m := &matcher{}
	seen := map[string]bool{}
	for _, ps := range pats {
		for _, p := range ps {
			if len(p.from) == 0 || seen[string(p.from)] {
				continue
			}
			seen[string(p.from)] = true
			m.pats = append(m.pats, p)
		}
	}
	slices.SortStableFunc(m.pats, func(a, b pattern) int { return len(b.from) - len(a.from) })
	m.byTwo = map[uint16][]int{}
	for i, p := range m.pats {
		m.byFirst[p.from[0]] = append(m.byFirst[p.from[0]], i)
		if len(p.from) < 3 {
			m.short[p.from[0]] = append(m.short[p.from[0]], i)
			continue
		}
		k := uint16(p.from[0])<<8 | uint16(p.from[1])
		m.two[k/64] |= 1 << (k % 64)
		k3 := key3(p.from)
		m.three[k3/64] |= 1 << (k3 % 64)
		m.byTwo[k] = append(m.byTwo[k], i)
	}
	return m
}

// candidates lists the patterns that may start at buf[i], longest first.
func (m *matcher) candidates(buf []byte, i int) []int {
	if i+2 >= len(buf) {
		return m.byFirst[buf[i]] // a partial match, or a short one
	}
	k := uint16(buf[i])<<8 | uint16(buf[i+1])
	if !bit(&m.two, k) || !bit(&m.three, key3(buf[i:])) {
		return m.short[buf[i]]
	}
	c := m.byTwo[k]
	if short := m.short[buf[i]]; len(short) > 0 {
		c = append(slices.Clip(c), short...) // the shortest come last
	}
	return c
}

// scan appends buf to dst with every pattern replaced, calling hit for
// each. Unless final, it stops where the rest of buf could be the start of
// a pattern not yet complete, and returns how much of buf it used: the
// caller keeps the rest for the next scan.
func (m *matcher) scan(dst, buf []byte, final bool, hit func(name string)) ([]byte, int) {
	start, i := 0, 0
	for i < len(buf) {
		cands := m.candidates(buf, i)
		if len(cands) == 0 {
			i++
			continue
		}
		rest := buf[i:]
		matched := -1
		for _, pi := range cands {
			from := m.pats[pi].from
			if len(rest) >= len(from) {
				if bytes.Equal(rest[:len(from)], from) {
					matched = pi
					break
				}
			} else if !final && bytes.HasPrefix(from, rest) {
				// Maybe this one, maybe not: wait for more.
				return append(dst, buf[start:i]...), i
			}
		}
		if matched < 0 {
			i++
			continue
		}
		p := m.pats[matched]
		dst = append(append(dst, buf[start:i]...), p.to...)
		hit(p.name)
		i += len(p.from)
		start = i
	}
	return append(dst, buf[start:]...), len(buf)
}

// replace scrubs a whole string (a header value).
func (m *matcher) replace(s string, hit func(name string)) string {
	out, _ := m.scan(nil, []byte(s), true, hit)
	return string(out)
}

// scrubReader scrubs src as it is read.
type scrubReader struct {
	src   io.Reader
	m     *matcher
	hit   func(name string)
	atEOF func() // called once, when src ends cleanly
	buf   []byte // read buffer
	pend  []byte // bytes of src not scanned yet (a possible start)
	out   []byte // scanned bytes not yet returned
	off   int
	err   error
}

func newScrubReader(src io.Reader, m *matcher, hit func(string), atEOF func()) *scrubReader {
	return &scrubReader{src: src, m: m, hit: hit, atEOF: atEOF, buf: make([]byte, 32<<10)}
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for r.off >= len(r.out) {
		if r.err != nil {
			return 0, r.err
		}
		n, err := r.src.Read(r.buf)
		r.pend = append(r.pend, r.buf[:n]...)
		var used int
		r.out, used = r.m.scan(r.out[:0], r.pend, err != nil, r.hit)
		r.off = 0
		r.pend = r.pend[:copy(r.pend, r.pend[used:])]
		if err != nil {
			if errors.Is(err, io.EOF) && r.atEOF != nil {
				r.atEOF()
			}
			r.err = err
		}
	}
	n := copy(p, r.out[r.off:])
	r.off += n
	return n, nil
}

// gunzipReader decompresses src, starting at the first read (a body may be
// empty).
type gunzipReader struct {
	src io.Reader
	zr  *gzip.Reader
}

func (g *gunzipReader) Read(p []byte) (int, error) {
	if g.zr == nil {
		zr, err := gzip.NewReader(g.src)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("gzip response body: %w", err)
		}
		g.zr = zr
	}
	return g.zr.Read(p)
}

// gzipReader compresses src, flushing after each read so a stream stays one.
type gzipReader struct {
	src  io.Reader
	zw   *gzip.Writer
	out  bytes.Buffer
	tmp  []byte
	done error
}

func newGzipReader(src io.Reader) *gzipReader {
	g := &gzipReader{src: src, tmp: make([]byte, 32<<10)}
	g.zw, _ = gzip.NewWriterLevel(&g.out, gzip.BestSpeed) // a valid level
	return g
}

func (g *gzipReader) Read(p []byte) (int, error) {
	for g.out.Len() == 0 {
		if g.done != nil {
			return 0, g.done
		}
		n, err := g.src.Read(g.tmp)
		if n > 0 {
			g.zw.Write(g.tmp[:n]) // into a bytes.Buffer: cannot fail
			g.zw.Flush()
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				g.zw.Close()
			}
			g.done = err
		}
	}
	return g.out.Read(p)
}

// readCloser reads r and closes c.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// errEncoding: a response the gateway cannot search for secret values.
var errEncoding = errors.New("response Content-Encoding the gateway cannot check for secrets")

// scrubResponse readies resp (the answer to req) to reach the sandbox with
// every real secret value rewritten to its placeholder: the status line and
// headers now, the body and trailers as they are read. The body's length
// changes, so it goes out chunked (or, to an HTTP/1.0 client, delimited by
// closing the connection).
func (inj *injector) scrubResponse(req *http.Request, resp *http.Response) error {
	m := newMatcher(inj.basic, inj.static)
	hit := func(name string) { inj.reflected[name]++ }
	resp.Status = m.replace(resp.Status, hit)
	scrubHeader(resp.Header, m, hit)
	noBody := req.Method == http.MethodHead || resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified || resp.Body == nil || resp.Body == http.NoBody
	if noBody {
		return nil
	}
	var src io.Reader = resp.Body
	gz := false
	switch ce := resp.Header.Values("Content-Encoding"); {
	case len(ce) == 0 || len(ce) == 1 && strings.EqualFold(strings.TrimSpace(ce[0]), "identity"):
	case len(ce) == 1 && (strings.EqualFold(strings.TrimSpace(ce[0]), "gzip") || strings.EqualFold(strings.TrimSpace(ce[0]), "x-gzip")):
		gz = true
		src = &gunzipReader{src: src}
	default:
		return fmt.Errorf("%w: %s", errEncoding, strings.Join(ce, ", "))
	}
	trailer := resp.Trailer
	var body io.Reader = newScrubReader(src, m, hit, func() { scrubHeader(trailer, m, hit) })
	if gz {
		body = newGzipReader(body)
		// The digests were of the upstream's bytes.
		resp.Header.Del("Content-Md5")
		resp.Header.Del("Content-Digest")
	}
	resp.Body = readCloser{Reader: body, c: resp.Body}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	if req.ProtoAtLeast(1, 1) {
		resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
		resp.TransferEncoding = []string{"chunked"}
	} else {
		resp.TransferEncoding = nil
		resp.Close = true
	}
	return nil
}

func scrubHeader(h http.Header, m *matcher, hit func(string)) {
	for k, vs := range h {
		for i, v := range vs {
			vs[i] = m.replace(v, hit)
		}
		h[k] = vs
	}
}

// reflections records what the connection's responses carried back: the
// event's count, the sandbox's live counter.
func (s *conn) reflections() int64 {
	if s.inj == nil {
		return 0
	}
	n := s.inj.reflectedTotal()
	s.c.cnt.reflected.Add(n)
	return n
}

// Reflections is how many real secret values the gateway rewrote in
// responses to a sandbox since this process started.
func (g *Gateway) Reflections(sandboxID string) int64 {
	g.mu.Lock()
	c := g.counters[sandboxID]
	g.mu.Unlock()
	if c == nil {
		return 0
	}
	return c.reflected.Load()
}

// auditReflections records egress.secret_reflected for a connection whose
// responses carried real values, at most one per sandbox and host per
// DenialAuditWindow (the next one counts those folded in). Run after the
// event is stored: it names it.
func (s *conn) auditReflections(ctx context.Context) {
	if s.inj == nil || s.ev.SecretsReflected == 0 {
		return
	}
	g, ev := s.g, s.ev
	names := s.inj.reflectedNames()
	g.log.Warn("egress: real secret value in a response, rewritten to its placeholder", "tenant", ev.TenantID,
		"sandbox", ev.SandboxID, "host", ev.Host, "secrets", strings.Join(names, ","), "count", ev.SecretsReflected)
	if g.cfg.Audit == nil {
		return
	}
	ok, suppressed := g.reflected.Admit(denialKey(ev.SandboxID, ev.Host), g.cfg.Clock.Now())
	if !ok {
		return
	}
	g.writeAudit(ctx, ev, audit.TypeEgressSecretReflected, map[string]any{
		"host": ev.Host, "port": ev.Port, "method": ev.Method, "vm": ev.VMID, "secrets": names,
		"count": ev.SecretsReflected, "egress_event": ev.ID, "suppressed": suppressed,
	})
}
