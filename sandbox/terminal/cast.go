package terminal

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// CastEvent is one event of a recording.
type CastEvent struct {
	Time float64 // seconds since the start
	Kind string  // CastOutput, CastInput, CastResize or CastMarker
	Data string
}

// Cast is a recording read back.
type Cast struct {
	Header CastHeader
	Events []CastEvent
}

// maxCastLine bounds one line of a recording: events hold at most one read
// of a terminal, a few KiB, and a marker.
const maxCastLine = 4 << 20

// ReadCast reads an asciicast v2 recording.
func ReadCast(r io.Reader) (Cast, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxCastLine)
	var c Cast
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return Cast{}, fmt.Errorf("read recording: %w", err)
		}
		return Cast{}, errors.New("read recording: empty")
	}
	if err := json.Unmarshal(sc.Bytes(), &c.Header); err != nil {
		return Cast{}, fmt.Errorf("read recording header: %w", err)
	}
	if c.Header.Version != 2 {
		return Cast{}, fmt.Errorf("read recording: asciicast version %d, not 2", c.Header.Version)
	}
	for n := 2; sc.Scan(); n++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var raw []json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil || len(raw) != 3 {
			return Cast{}, fmt.Errorf("read recording: line %d is not an event [time, code, data]", n)
		}
		var ev CastEvent
		if err := errors.Join(json.Unmarshal(raw[0], &ev.Time), json.Unmarshal(raw[1], &ev.Kind), json.Unmarshal(raw[2], &ev.Data)); err != nil {
			return Cast{}, fmt.Errorf("read recording: line %d: %w", n, err)
		}
		c.Events = append(c.Events, ev)
	}
	if err := sc.Err(); err != nil {
		return Cast{}, fmt.Errorf("read recording: %w", err)
	}
	return c, nil
}

// Output is everything the terminal printed, in order: what a replay shows.
func (c Cast) Output() []byte {
	var b strings.Builder
	for _, ev := range c.Events {
		if ev.Kind == CastOutput {
			b.WriteString(ev.Data)
		}
	}
	return []byte(b.String())
}

// Input is every keystroke recorded, in order.
func (c Cast) Input() []byte {
	var b strings.Builder
	for _, ev := range c.Events {
		if ev.Kind == CastInput {
			b.WriteString(ev.Data)
		}
	}
	return []byte(b.String())
}

// Duration is the time of the last event.
func (c Cast) Duration() float64 {
	if len(c.Events) == 0 {
		return 0
	}
	return c.Events[len(c.Events)-1].Time
}

// recorded is what a recording holds, read back without its session: a
// session whose server stopped before closing it.
type recorded struct {
	Size    int64         // bytes of the file
	Events  int64         // events read
	Out, In int64         // bytes of output and input events
	Last    time.Duration // time of the last event, from the start
	// Whole is the size of the whole lines (header and events) before a
	// torn one; Newline says the last of them ends in its newline.
	Whole   int64
	Newline bool
	// Lost is the output the recording says it dropped (a full spool);
	// Truncated says where and why it stopped at a cap, "" if it did not.
	Lost      int64
	Truncated string
}

// readRecorded reads a recording a crashed server left. It may end in a
// torn line (the writer buffers): reading stops at the first line that is
// not a whole event.
func readRecorded(path string) (recorded, error) {
	f, err := os.Open(path)
	if err != nil {
		return recorded{}, fmt.Errorf("read recording: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return recorded{}, fmt.Errorf("read recording: %w", err)
	}
	out := recorded{Size: fi.Size()}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxCastLine)
	if !sc.Scan() {
		return out, nil // not even a header: nothing recorded
	}
	whole := func(n int) {
		out.Whole += int64(n) + 1
		out.Newline = out.Whole <= out.Size
		out.Whole = min(out.Whole, out.Size)
	}
	whole(len(sc.Bytes()))
	for sc.Scan() {
		var raw []json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil || len(raw) != 3 {
			break
		}
		var ev CastEvent
		if errors.Join(json.Unmarshal(raw[0], &ev.Time), json.Unmarshal(raw[1], &ev.Kind), json.Unmarshal(raw[2], &ev.Data)) != nil {
			break
		}
		whole(len(sc.Bytes()))
		out.Events++
		switch ev.Kind {
		case CastOutput:
			out.Out += int64(len(ev.Data))
		case CastInput:
			out.In += int64(len(ev.Data))
		case CastMarker:
			var n int64
			if _, err := fmt.Sscanf(ev.Data, "recording dropped %d bytes here", &n); err == nil && n > 0 {
				out.Lost += n
			}
			if t, ok := strings.CutPrefix(ev.Data, "recording truncated at "); ok {
				t, _, _ = strings.Cut(t, "; the terminal went on unrecorded")
				out.Truncated = "truncated at " + t
			}
		}
		if d := time.Duration(ev.Time * float64(time.Second)); d > out.Last {
			out.Last = d
		}
	}
	return out, nil
}

// openResumed opens the recording at path to append to it after what
// prior read of it: a torn last line is cut off first.
func openResumed(path string, prior *recorded) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("resume recording: %w", err)
	}
	if prior.Whole < prior.Size {
		if err := f.Truncate(prior.Whole); err != nil {
			f.Close()
			return nil, fmt.Errorf("resume recording: %w", err)
		}
		prior.Size = prior.Whole
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("resume recording: %w", err)
	}
	if prior.Size > 0 && !prior.Newline {
		if _, err := f.Write([]byte("\n")); err != nil {
			f.Close()
			return nil, fmt.Errorf("resume recording: %w", err)
		}
		prior.Size++
	}
	return f, nil
}
