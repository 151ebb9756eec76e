package terminal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// CastHeader is the first line of an asciicast v2 recording.
type CastHeader struct {
	Version   int               `json:"version"`
	Width     int               `json:"width"`
	Height    int               `json:"height"`
	Timestamp int64             `json:"timestamp,omitempty"`
	Title     string            `json:"title,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
}

// Event codes of asciicast v2.
const (
	CastOutput = "o"
	CastInput  = "i"
	CastResize = "r"
	CastMarker = "m"
)

// RecorderStats is what a recorder did, once closed.
type RecorderStats struct {
	Events       int64 // events written
	Dropped      int64 // events dropped because the spool was full
	DroppedBytes int64 // terminal bytes in those events
	Bytes        int64 // size of the recording
	// Truncated says where and why the recording stopped at a cap ("" when
	// it did not), as its marker event does; TruncatedBytes are the
	// terminal bytes left out after it.
	Truncated      string
	TruncatedBytes int64
}

// RecorderLimits cap a recording. The terminal keeps working past a cap:
// the recording gets a marker event saying where and why it stops, and
// nothing after it.
type RecorderLimits struct {
	// MaxBytes bounds the recording file, header and marker included
	// (0: no bound).
	MaxBytes int64
	// Budget, when set, is what the tenant's recordings may still take,
	// shared with its other live recordings.
	Budget *Budget
}

// Budget is how many bytes a tenant's recordings may still take, shared by
// its live recorders: each line written takes from it.
type Budget struct {
	total int64
	left  atomic.Int64
}

// NewBudget is a budget of left bytes out of a cap of total.
func NewBudget(total, left int64) *Budget {
	b := &Budget{total: total}
	b.left.Store(max(left, 0))
	return b
}

// Left is what the budget still holds.
func (b *Budget) Left() int64 { return b.left.Load() }

func (b *Budget) take(n int64) bool {
	for {
		l := b.left.Load()
		if l < n {
			return false
		}
		if b.left.CompareAndSwap(l, l-n) {
			return true
		}
	}
}

// force takes n even past the end (the marker that says so).
func (b *Budget) force(n int64) { b.left.Add(-n) }

// markerRoom is kept under MaxBytes for the marker that ends a capped
// recording.
const markerRoom = 256

type castEvent struct {
	at   float64 // seconds since the start
	kind string
	data []byte // never changed once queued
	lost int64  // bytes dropped just before this event
}

// Recorder writes a terminal session as asciicast v2 through an
// asynchronous spool: Write, Input and Resize never block (a full spool
// drops the event, counts it, and the recording gets a marker saying how
// much is missing where), a goroutine encodes and writes. It is an
// io.Writer of the terminal's output, so it can sit next to any other.
type Recorder struct {
	w     io.WriteCloser
	now   func() time.Time
	start time.Time

	lim    RecorderLimits
	capped atomic.Bool // the recording reached a cap: sends stop queuing

	mu       sync.Mutex // guards sends against Close
	closed   bool
	cutBytes int64 // terminal bytes not queued since capped, under mu
	ch       chan castEvent
	lost     int64 // bytes dropped since the last queued event

	dropped, droppedBytes int64 // under mu
	done                  chan struct{}
	stats                 RecorderStats // the writer's; read after done
	err                   error
}

// NewRecorder writes h and then the events to w, with room for spool
// events waiting to be written. Times count from start; now is the clock.
func NewRecorder(w io.WriteCloser, h CastHeader, start time.Time, now func() time.Time, spool int) (*Recorder, error) {
	return NewLimitedRecorder(w, h, start, now, spool, RecorderLimits{})
}

// NewLimitedRecorder is NewRecorder with caps on what it writes.
func NewLimitedRecorder(w io.WriteCloser, h CastHeader, start time.Time, now func() time.Time, spool int, lim RecorderLimits) (*Recorder, error) {
	if now == nil {
		now = time.Now
	}
	if spool <= 0 {
		spool = 4096
	}
	h.Version = 2
	line, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("recording header: %w", err)
	}
	r := &Recorder{w: w, now: now, start: start, lim: lim, ch: make(chan castEvent, spool), done: make(chan struct{})}
	bw := bufio.NewWriterSize(w, 64<<10)
	n, err := bw.Write(append(line, '\n'))
	if err != nil {
		return nil, fmt.Errorf("recording header: %w", err)
	}
	r.stats.Bytes = int64(n)
	if lim.Budget != nil {
		lim.Budget.force(int64(n))
	}
	go r.run(bw, 0, "")
	return r, nil
}

// resumeRecorder continues a recording that a stopped server left: w
// appends to it, prior is what it holds (read back by readRecorded; a torn
// last line cut off already). Its first event is a marker saying note,
// unless the recording had stopped at a cap: then it stays stopped.
func resumeRecorder(w io.WriteCloser, prior recorded, start time.Time, now func() time.Time, spool int, lim RecorderLimits, note string) *Recorder {
	if now == nil {
		now = time.Now
	}
	if spool <= 0 {
		spool = 4096
	}
	r := &Recorder{w: w, now: now, start: start, lim: lim, ch: make(chan castEvent, spool), done: make(chan struct{})}
	r.stats.Bytes = prior.Size
	if lim.Budget != nil {
		lim.Budget.force(prior.Size)
	}
	if prior.Truncated != "" {
		r.capped.Store(true)
	}
	go r.run(bufio.NewWriterSize(w, 64<<10), prior.Events, prior.Truncated)
	r.send(CastMarker, []byte(note))
	return r
}

// Write records p as terminal output. It never blocks and never fails:
// the terminal must not wait for its recording.
func (r *Recorder) Write(p []byte) (int, error) {
	r.send(CastOutput, bytes.Clone(p))
	return len(p), nil
}

// output records p, which the caller never changes again, as output.
func (r *Recorder) output(p []byte) { r.send(CastOutput, p) }

// Input records keystrokes (only when the session records input).
func (r *Recorder) Input(p []byte) { r.send(CastInput, bytes.Clone(p)) }

// Resize records a new terminal size.
func (r *Recorder) Resize(cols, rows uint16) {
	r.send(CastResize, []byte(strconv.Itoa(int(cols))+"x"+strconv.Itoa(int(rows))))
}

func (r *Recorder) send(kind string, p []byte) {
	at := r.now().Sub(r.start).Seconds()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.capped.Load() {
		if kind != CastResize {
			r.cutBytes += int64(len(p))
		}
		return
	}
	select {
	case r.ch <- castEvent{at: at, kind: kind, data: p, lost: r.lost}:
		r.lost = 0
	default:
		r.dropped++
		if kind != CastResize {
			r.droppedBytes += int64(len(p))
			r.lost += int64(len(p))
		}
	}
}

// Close writes what is queued, closes the recording and says what was
// recorded. Events sent after Close are ignored.
func (r *Recorder) Close() (RecorderStats, error) {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.ch)
	}
	r.mu.Unlock()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.stats
	st.Dropped, st.DroppedBytes = r.dropped, r.droppedBytes
	st.TruncatedBytes += r.cutBytes
	return st, r.err
}

// run writes the queued events; events and truncated are what the
// recording held before (a resumed one).
func (r *Recorder) run(bw *bufio.Writer, events int64, truncated string) {
	defer close(r.done)
	var (
		line    bytes.Buffer
		carry   = map[string][]byte{} // an incomplete UTF-8 sequence per stream
		enc     = json.NewEncoder(&line)
		failed  error
		written int64
		cut     int64
	)
	enc.SetEscapeHTML(false)
	encode := func(at float64, kind string, data []byte) {
		line.Reset()
		line.WriteByte('[')
		line.Write(strconv.AppendFloat(nil, at, 'f', 6, 64))
		line.WriteString(`, "` + kind + `", `)
		// asciicast is JSON text: invalid UTF-8 becomes U+FFFD here.
		_ = enc.Encode(string(data))
		line.Truncate(line.Len() - 1) // Encode's newline
		line.WriteString("]\n")
	}
	write := func() {
		n, err := bw.Write(line.Bytes())
		written += int64(n)
		events++
		if err != nil {
			failed = err
		}
	}
	// stop ends the recording at a cap with a marker saying so.
	stop := func(at float64, why string) {
		truncated = why
		r.capped.Store(true)
		encode(at, CastMarker, []byte("recording "+why+"; the terminal went on unrecorded"))
		if r.lim.Budget != nil {
			r.lim.Budget.force(int64(line.Len()))
		}
		write()
	}
	emit := func(at float64, kind string, data []byte) {
		if failed != nil {
			return
		}
		text := kind == CastOutput || kind == CastInput
		if truncated != "" {
			if text {
				cut += int64(len(data))
			}
			return
		}
		encode(at, kind, data)
		n := int64(line.Len())
		room, why := int64(math.MaxInt64), ""
		if r.lim.MaxBytes > 0 {
			room, why = r.lim.MaxBytes-markerRoom-(r.stats.Bytes+written), "the session's cap is "+byteSize(r.lim.MaxBytes)
		}
		if b := r.lim.Budget; b != nil && b.Left() < room {
			room, why = b.Left(), "the tenant's recordings reached their cap of "+byteSize(b.total)
		}
		if n <= room && (r.lim.Budget == nil || r.lim.Budget.take(n)) {
			write()
			return
		}
		// It does not fit: as much of it as does (whole characters), then
		// the marker.
		var kept []byte
		for k := len(data); text && room > 0 && k > 0; {
			k = min(k-1, int(float64(k)*float64(room)/float64(n)))
			part, _ := splitUTF8(data[:max(k, 0)])
			if len(part) == 0 {
				break
			}
			encode(at, kind, part)
			if n = int64(line.Len()); n <= room {
				kept = part
				break
			}
		}
		if len(kept) > 0 && (r.lim.Budget == nil || r.lim.Budget.take(n)) {
			write()
		} else {
			kept = nil
		}
		if text {
			cut += int64(len(data) - len(kept))
		}
		stop(at, "truncated at "+byteSize(r.stats.Bytes+written)+": "+why)
	}
	for ev := range r.ch {
		if ev.lost > 0 {
			emit(ev.at, CastMarker, []byte(fmt.Sprintf("recording dropped %d bytes here: the spool was full", ev.lost)))
		}
		data := ev.data
		if ev.kind == CastOutput || ev.kind == CastInput {
			// A multi-byte character split between two reads is written
			// whole, with the second: JSON strings hold characters, not bytes.
			if c := carry[ev.kind]; len(c) > 0 {
				data = append(append([]byte(nil), c...), data...)
			}
			data, carry[ev.kind] = splitUTF8(data)
			if len(data) == 0 {
				continue
			}
		}
		emit(ev.at, ev.kind, data)
		if len(r.ch) == 0 && failed == nil {
			failed = bw.Flush()
		}
	}
	end := r.now().Sub(r.start).Seconds()
	for _, kind := range []string{CastOutput, CastInput} {
		if c := carry[kind]; len(c) > 0 {
			emit(end, kind, c)
		}
	}
	if failed == nil {
		failed = bw.Flush()
	}
	if err := r.w.Close(); failed == nil {
		failed = err
	}
	r.mu.Lock()
	r.stats.Events, r.stats.Bytes = events, r.stats.Bytes+written
	r.stats.Truncated, r.stats.TruncatedBytes = truncated, cut
	if failed != nil {
		r.err = fmt.Errorf("write recording: %w", failed)
	}
	r.mu.Unlock()
}

// byteSize writes n bytes the way people read sizes: 50 MiB, 1.5 GiB.
func byteSize(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < 3 {
		v /= 1024
		i++
	}
	unit := []string{"KiB", "MiB", "GiB", "TiB"}[i]
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10) + " " + unit
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + unit
}

// splitUTF8 cuts p before a multi-byte character its end holds only the
// beginning of.
func splitUTF8(p []byte) (whole, rest []byte) {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return p[:i], append([]byte(nil), p[i:]...)
			}
			break
		}
	}
	return p, nil
}
