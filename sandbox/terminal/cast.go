package terminal

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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
