package benchrec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// fakeTB records Fatalf instead of stopping, so the refusals can be seen.
type fakeTB struct {
	testing.TB
	fatal []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = append(f.fatal, fmt.Sprintf(format, args...))
}

func TestRecord(t *testing.T) {
	tests := []struct {
		name string
		in   Result
		want string // the printed line, "" when refused
	}{
		{"ratio", Result{Name: "exec_true_vs_floor", Value: 12, Unit: "ms", Baseline: 8},
			`bench-result: {"name":"exec_true_vs_floor","value":12,"unit":"ms","baseline":8,"ratio":1.5}`},
		{"absolute", Result{Name: "idle_sandboxes_per_2gib_vm", Value: 300, Unit: "count"},
			`bench-result: {"name":"idle_sandboxes_per_2gib_vm","value":300,"unit":"count"}`},
		{"caller's ratio ignored", Result{Name: "a", Value: 1, Unit: "ms", Ratio: 7},
			`bench-result: {"name":"a","value":1,"unit":"ms"}`},
		{"bad name", Result{Name: "Exec True", Value: 1}, ""},
		{"empty name", Result{Value: 1}, ""},
		{"NaN", Result{Name: "a", Value: math.NaN()}, ""},
		{"infinite baseline", Result{Name: "a", Value: 1, Baseline: math.Inf(1)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			f := &fakeTB{}
			record(&out, f, tt.in)
			if tt.want == "" {
				if len(f.fatal) == 0 || out.Len() != 0 {
					t.Errorf("Got(record %+v) = %q, fatal %v; want refused, nothing printed", tt.in, out.String(), f.fatal)
				}
				return
			}
			if len(f.fatal) != 0 || out.String() != "\n"+tt.want+"\n" {
				t.Errorf("Got(record %+v) = %q, fatal %v; want %q on a line of its own", tt.in, out.String(), f.fatal, tt.want)
			}
			var back Result
			if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(out.String()), Prefix)), &back); err != nil || back.Name != tt.in.Name {
				t.Errorf("Got(parse back) = %+v, %v; want %s", back, err, tt.in.Name)
			}
		})
	}
}

// TestRecordMetric: a benchmark's metrics show the figure too.
func TestRecordMetric(t *testing.T) {
	r := testing.Benchmark(func(b *testing.B) {
		record(&bytes.Buffer{}, b, Result{Name: "x_vs_y", Value: 1, Unit: "ms", Baseline: 4})
		record(&bytes.Buffer{}, b, Result{Name: "n", Value: 3, Unit: "count"})
	})
	if got := r.Extra["x_vs_y-ratio"]; got != 0.25 {
		t.Errorf("Got(x_vs_y-ratio) = %v; want 0.25", got)
	}
	if got := r.Extra["n-count"]; got != 3 {
		t.Errorf("Got(n-count) = %v; want 3", got)
	}
}
