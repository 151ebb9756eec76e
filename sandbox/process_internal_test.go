package sandbox

import (
	"strings"
	"testing"
)

// TestProcessRing: a process's output ring keeps the latest limit bytes,
// numbered by offset from the process's start (plus the base a re-attach
// starts at); a read from an offset gets exactly what follows it, from the
// oldest kept byte when the offset is older.
func TestProcessRing(t *testing.T) {
	p := newLiveProcess(Process{State: ProcessRunning}, 10, false)
	p.base = 100 // re-attached: the agent's output started at 100
	out, errw := processWriter{p, "stdout"}, processWriter{p, "stderr"}
	out.Write([]byte("abcd"))
	errw.Write([]byte("EF"))
	out.Write([]byte("ghij"))
	join := func(cs []ProcessChunk) (string, int64) {
		var b strings.Builder
		first := int64(-1)
		for _, c := range cs {
			if first < 0 {
				first = c.Offset
			}
			b.Write(c.Data)
		}
		return b.String(), first
	}
	for _, tc := range []struct {
		from      int64
		want      string
		wantFirst int64
	}{
		{100, "abcdEFghij", 100},
		{103, "dEFghij", 103},
		{104, "EFghij", 104},
		{110, "", -1},
	} {
		cs, _, _ := p.from(tc.from)
		if got, first := join(cs); got != tc.want || first != tc.wantFirst {
			t.Errorf("Got(from(%d)) = %q at %d; want %q at %d", tc.from, got, first, tc.want, tc.wantFirst)
		}
	}
	// Past the bound the oldest chunks go; a too-long write keeps its tail.
	out.Write([]byte("KLM"))
	if got, first := join(must3(p.from(0))); got != "EFghijKLM" || first != 104 {
		t.Errorf("Got(from(0) after a drop) = %q at %d; want EFghijKLM at 104", got, first)
	}
	out.Write([]byte("0123456789xyz"))
	if got, first := join(must3(p.from(0))); got != "3456789xyz" || first != 116 {
		t.Errorf("Got(from(0) after a long write) = %q at %d; want its tail at 116", got, first)
	}
	if st := p.snapshot(); st.OutputBytes != 126 || st.OutputStart != 116 {
		t.Errorf("Got(snapshot) = output %d, start %d; want 126, 116", st.OutputBytes, st.OutputStart)
	}
}

func must3(cs []ProcessChunk, _ <-chan struct{}, _ bool) []ProcessChunk { return cs }

// TestSignalName: signals by name with or without SIG, any case; anything
// else is a field error naming "signal".
func TestSignalName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{{"SIGTERM", "TERM"}, {"kill", "KILL"}, {" sigint ", "INT"}, {"SIGFOO", ""}, {"9", ""}, {"", ""}} {
		got, err := SignalName(tc.in)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("Got(SignalName(%q)) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
