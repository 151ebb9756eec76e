// Package benchrec records the named figures of `make bench`: each one a
// value against a baseline measured in the same run, so the target is the
// ratio and not an absolute time that moves with the machine's load.
//
// A benchmark calls Record once per figure. Record prints one line,
//
//	bench-result: {"name":"exec_true_vs_floor","value":12.1,"unit":"ms","baseline":7.9,"ratio":1.53}
//
// which scripts/benchjson collects into bench-results.json (adding the
// commit), and reports the ratio (or the value, when there is no baseline)
// as a benchmark metric so `go test -bench` output shows it too.
package benchrec

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"testing"
)

// Prefix starts every line Record prints.
const Prefix = "bench-result: "

// Result is one named figure.
type Result struct {
	// Name is the figure's stable name (lower_snake_case), e.g.
	// "vm_restore_vs_cold_boot"; the README table and the targets
	// use it.
	Name string `json:"name"`
	// Value is what was measured, in Unit.
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Baseline is the same-run reference in the same Unit; 0 when the
	// figure is absolute (a count, an added latency).
	Baseline float64 `json:"baseline,omitempty"`
	// Ratio is Value/Baseline, filled by Record when Baseline is set.
	Ratio float64 `json:"ratio,omitempty"`
	// Commit is filled by scripts/benchjson.
	Commit string `json:"commit,omitempty"`
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,79}$`)

// Record prints r for scripts/benchjson and reports it as a metric of b.
func Record(b testing.TB, r Result) {
	b.Helper()
	// Straight to stdout: b.Log lines are indented and may be cut.
	record(os.Stdout, b, r)
}

func record(w io.Writer, b testing.TB, r Result) {
	b.Helper()
	if !validName.MatchString(r.Name) {
		b.Fatalf("benchrec: bad figure name %q", r.Name)
		return
	}
	if bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }; bad(r.Value) || bad(r.Baseline) {
		b.Fatalf("benchrec: %s: value %v, baseline %v", r.Name, r.Value, r.Baseline)
		return
	}
	r.Ratio = 0
	if r.Baseline != 0 {
		r.Ratio = r.Value / r.Baseline
	}
	line, err := json.Marshal(r)
	if err != nil {
		b.Fatalf("benchrec: %v", err)
		return
	}
	// At the start of a line of its own: benchjson reads only those.
	fmt.Fprintf(w, "\n%s%s\n", Prefix, line)
	if bb, ok := b.(*testing.B); ok {
		if r.Baseline != 0 {
			bb.ReportMetric(r.Ratio, r.Name+"-ratio")
		} else {
			bb.ReportMetric(r.Value, r.Name+"-"+r.Unit)
		}
	}
}
