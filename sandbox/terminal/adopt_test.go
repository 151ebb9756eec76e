package terminal

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pipePTY is a PTY whose output the test writes.
type pipePTY struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func newPipePTY() *pipePTY {
	r, w := io.Pipe()
	return &pipePTY{r: r, w: w}
}

func (p *pipePTY) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *pipePTY) Write(b []byte) (int, error) { return len(b), nil }
func (p *pipePTY) Resize(uint16, uint16) error { return nil }
func (p *pipePTY) Close() error                { p.w.Close(); return nil }
func (p *pipePTY) Wait() (Exit, error) {
	return Exit{Code: 0, Reason: "exited", Duration: time.Second}, nil
}

func TestRingAt(t *testing.T) {
	tests := []struct {
		name      string
		writes    []string
		off       int64
		want      string
		wantStart int64
	}{
		{"nothing yet", nil, 0, "", 100},
		{"before the base: from the base", []string{"abc"}, 0, "abc", 100},
		{"inside", []string{"abc", "de"}, 102, "cde", 102},
		{"overwritten", []string{"abcdef", "ghij"}, 0, "cdefghij", 102},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRingAt(8, 100)
			for _, w := range tt.writes {
				r.write([]byte(w))
			}
			got, start := r.since(tt.off)
			if string(got) != tt.want || start != tt.wantStart {
				t.Errorf("Got(since(%d)) = %q from %d; want %q from %d", tt.off, got, start, tt.want, tt.wantStart)
			}
		})
	}
}

// TestResumedRecording: a recording a killed server left, torn last line
// included, is taken up: the torn line goes, a marker says where the
// recording resumed, and the output after it follows in the same file.
func TestResumedRecording(t *testing.T) {
	tests := []struct {
		name string
		tail string // what the killed writer left after its last whole event
	}{
		{"whole lines", ""},
		{"torn line", `[1.5, "o", "tor`},
		{"last line without its newline", "\x00"}, // marks: drop the final newline
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.cast")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now().Add(-time.Minute)
			rec, err := NewRecorder(f, CastHeader{Width: 80, Height: 24}, start, nil, 16)
			if err != nil {
				t.Fatal(err)
			}
			rec.Write([]byte("before\r\n"))
			if _, err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			switch tt.tail {
			case "":
			case "\x00":
				b = bytes.TrimSuffix(b, []byte("\n"))
			default:
				b = append(b, tt.tail...)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			prior, err := readRecorded(path)
			if err != nil {
				t.Fatal(err)
			}
			if prior.Out != int64(len("before\r\n")) || prior.Events != 1 {
				t.Fatalf("Got(readRecorded) = %+v; want 1 event of 8 bytes", prior)
			}
			w, err := openResumed(path, &prior)
			if err != nil {
				t.Fatal(err)
			}
			r := resumeRecorder(w, prior, start, nil, 16, RecorderLimits{}, "resumed here")
			r.Write([]byte("after\r\n"))
			st, err := r.Close()
			if err != nil {
				t.Fatal(err)
			}
			f2, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f2.Close()
			c, err := ReadCast(f2)
			if err != nil {
				t.Fatalf("ReadCast(resumed) = %v", err)
			}
			if got := string(c.Output()); got != "before\r\nafter\r\n" {
				t.Errorf("Got(output of the resumed recording) = %q; want before and after", got)
			}
			var markers []string
			for _, ev := range c.Events {
				if ev.Kind == CastMarker {
					markers = append(markers, ev.Data)
				}
			}
			if len(markers) != 1 || markers[0] != "resumed here" {
				t.Errorf("Got(markers) = %q; want the resume marker", markers)
			}
			fi, _ := os.Stat(path)
			if st.Bytes != fi.Size() || st.Events != 3 {
				t.Errorf("Got(stats) = %+v; want %d bytes (the file), 3 events", st, fi.Size())
			}
		})
	}
}

// TestResumedHub: a hub taken up part way through a session counts offsets
// from where the PTY's output starts, lets joiners read what it got, and
// records only the output the recording did not have.
func TestResumedHub(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.cast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := NewRecorder(f, CastHeader{Width: 80, Height: 24}, time.Now(), nil, 16)
	if err != nil {
		t.Fatal(err)
	}
	p := newPipePTY()
	ended := make(chan End, 1)
	h := NewHub(p, HubConfig{ID: "s", Recorder: rec, OnEnd: func(e End) { ended <- e },
		Resume: &HubResume{Offset: 100, RecordFrom: 104, BytesIn: 7}})
	p.w.Write([]byte("old-new"))
	deadline := time.Now().Add(10 * time.Second)
	for h.State().Output < 107 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c, err := h.Join(JoinOptions{Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	hello := <-c.Out()
	data := <-c.Out()
	if hello.Control == nil || hello.Control.Offset == nil || *hello.Control.Offset != 100 || string(data.Data) != "old-new" {
		t.Errorf("Got(join from 0) = %+v, %q; want from offset 100, old-new", hello.Control, data.Data)
	}
	p.w.Close()
	e := <-ended
	if e.BytesOut != 107 || e.BytesIn != 7 {
		t.Errorf("Got(end) = %d out, %d in; want 107 and 7", e.BytesOut, e.BytesIn)
	}
	f2, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	cast, err := ReadCast(f2)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(cast.Output()); got != "new" {
		t.Errorf("Got(recorded) = %q; want only what came after RecordFrom: %q", got, "new")
	}
	if !strings.Contains(e.Reason, "exited") {
		t.Errorf("Got(reason) = %q; want the exit", e.Reason)
	}
}

// TestResumedHubJoinAhead: a watcher reconnecting to a hub just taken up
// (another server stopped) asks for an offset the agent's replay has not
// reached yet; it gets what follows that offset once, not the replay again.
func TestResumedHubJoinAhead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"replay in one read", []string{"seen-unseen"}, "unseen"},
		{"replay split before the offset", []string{"se", "en-", "unseen"}, "unseen"},
		{"replay split across the offset", []string{"seen-un", "seen"}, "unseen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipePTY()
			h := NewHub(p, HubConfig{ID: "s", Resume: &HubResume{Offset: 0}})
			defer h.End("test over")
			c, err := h.Join(JoinOptions{Offset: 5}) // it saw "seen-"
			if err != nil {
				t.Fatal(err)
			}
			hello := <-c.Out()
			if hello.Control == nil || hello.Control.Offset == nil || *hello.Control.Offset != 5 {
				t.Fatalf("Got(hello) = %+v; want offset 5", hello.Control)
			}
			for _, w := range tc.writes {
				p.w.Write([]byte(w))
			}
			var got []byte
			for len(got) < len(tc.want) {
				m := <-c.Out()
				got = append(got, m.Data...)
			}
			if string(got) != tc.want {
				t.Errorf("Got(output after resuming at 5) = %q; want %q", got, tc.want)
			}
		})
	}
}
