// Command benchjson turns `go test -bench` output into bench-results.json
// and the README's bench table.
//
// Collect a run's figures (the `bench-result: {json}` lines benchrec.Record
// prints, one per named figure against a baseline measured in the same run):
//
//	go test -run '^$' -bench . -benchtime 1x ./... > bench.log
//	go run ./scripts/benchjson -o bench-results.json -failed bench-failed.json -require < bench.log
//
// bench-results.json is a JSON list of {name, value, unit, baseline, ratio,
// commit, date, package, benchmark}, one entry per figure (baseline and
// ratio are null for absolute figures: a count, an added latency).
// bench-failed.json is a JSON list of what did not produce its figures:
// failed benchmarks ("--- FAIL:"), failed packages (a panic, a timeout, a
// build failure, a failing TestMain) and, with -require, the target
// figures no benchmark recorded ("missing"). benchjson prints the figures,
// and exits 1 when that list is not empty (after writing both files), so a
// failed benchmark fails `make bench`.
//
// Rewrite the README's table (between the bench-table markers) from the files:
//
//	go run ./scripts/benchjson -readme README.md -results bench-results.json -failed bench-failed.json
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/sandbox/benchrec"
)

// Entry is one figure of bench-results.json.
type Entry struct {
	Name     string   `json:"name"`
	Value    float64  `json:"value"`
	Unit     string   `json:"unit"`
	Baseline *float64 `json:"baseline"`
	Ratio    *float64 `json:"ratio"`
	Commit   string   `json:"commit"`
	// Date is when the run was collected (RFC 3339, UTC).
	Date string `json:"date"`
	// Package and Benchmark say where the figure came from: the benchmark
	// is the next one go test named after the line (Record prints during the
	// benchmark, go test names it when it ends), best effort.
	Package   string `json:"package"`
	Benchmark string `json:"benchmark,omitempty"`
}

// Failure is one entry of bench-failed.json.
type Failure struct {
	// Status is "failed" (a benchmark), "package failed" or "missing" (a
	// target figure nothing recorded).
	Status    string `json:"status"`
	Package   string `json:"package,omitempty"`
	Benchmark string `json:"benchmark,omitempty"`
	Name      string `json:"name,omitempty"`
	// Reason is the benchmark's log (its first lines) or the package's
	// failure line.
	Reason string `json:"reason,omitempty"`
	Commit string `json:"commit"`
	Date   string `json:"date"`
}

// Run is what one log holds.
type Run struct {
	Results []Entry
	Failed  []Failure
}

const maxReasonLines = 20

var (
	failRE    = regexp.MustCompile(`^\s*--- FAIL: (Benchmark\S*)`)
	pkgFailRE = regexp.MustCompile(`^FAIL\s+(\S+)(?:\s+(.*))?$`)
	nameRE    = regexp.MustCompile(`^(Benchmark\S*)(?:\s+(\d+)\s+\S+ ns/op.*)?\s*$`)
	panicRE   = regexp.MustCompile(`^(panic: .*|\*\*\* Test killed.*|.*test timed out after.*)$`)
	endRE     = regexp.MustCompile(`^(?:ok|\?)\s+(\S+)`)
)

// parse reads a `go test -bench` log. procs is the -N suffix go test adds
// to benchmark names (GOMAXPROCS), stripped from them.
//
// go test prints each package's output as one block ended by its "ok" or
// "FAIL" line, which names the package; within a block a benchmark's
// figures come before its name (go test names a benchmark once its first
// run is over), and a failed one's log follows its "--- FAIL:" line.
func parse(r io.Reader, procs int) (Run, error) {
	run := Run{Results: []Entry{}, Failed: []Failure{}}
	suffix := "-" + strconv.Itoa(procs)
	clean := func(name string) string {
		if procs > 1 {
			return strings.TrimSuffix(name, suffix)
		}
		return name
	}
	results, failed := 0, 0 // where this package's block starts
	pending := 0            // run.Results[pending:] wait for their benchmark's name
	reason := -1            // index in run.Failed of the failure whose log follows
	lastPanic := ""         // in this block
	blockPkg := ""          // its "pkg:" line, for a block the log cuts short
	name := func(n string) {
		for i := pending; i < len(run.Results); i++ {
			run.Results[i].Benchmark = n
		}
		pending = len(run.Results)
	}
	endBlock := func(pkg string) {
		for i := results; i < len(run.Results); i++ {
			run.Results[i].Package = pkg
		}
		for i := failed; i < len(run.Failed); i++ {
			run.Failed[i].Package = pkg
		}
		results, failed, pending, lastPanic, blockPkg = len(run.Results), len(run.Failed), len(run.Results), "", ""
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if reason >= 0 {
			// A failed benchmark's log: indented lines after "--- FAIL:".
			if strings.HasPrefix(raw, "    ") && line != "" {
				f := &run.Failed[reason]
				if strings.Count(f.Reason, "\n") < maxReasonLines-1 {
					if f.Reason != "" {
						f.Reason += "\n"
					}
					f.Reason += line
				}
				continue
			}
			reason = -1
		}
		if fig, ok := strings.CutPrefix(raw, benchrec.Prefix); ok {
			// Record starts its line with the prefix; elsewhere on a line it is
			// some log's text.
			var res benchrec.Result
			if err := json.Unmarshal([]byte(fig), &res); err != nil || res.Name == "" {
				return run, fmt.Errorf("bad %q line %q: %v", strings.TrimSpace(benchrec.Prefix), line, err)
			}
			e := Entry{Name: res.Name, Value: res.Value, Unit: res.Unit}
			if res.Baseline != 0 {
				b, r := res.Baseline, res.Value/res.Baseline
				e.Baseline, e.Ratio = &b, &r
			}
			run.Results = append(run.Results, e)
			continue
		}
		if p, ok := strings.CutPrefix(raw, "pkg: "); ok {
			blockPkg = p
			continue
		}
		if m := panicRE.FindStringSubmatch(line); m != nil {
			lastPanic = m[1]
			continue
		}
		if m := failRE.FindStringSubmatch(raw); m != nil {
			n := clean(m[1])
			name(n)
			run.Failed = append(run.Failed, Failure{Status: "failed", Benchmark: n})
			reason = len(run.Failed) - 1
			continue
		}
		if m := pkgFailRE.FindStringSubmatch(raw); m != nil {
			why := strings.TrimSpace(m[2])
			if _, err := time.ParseDuration(why); err == nil {
				why = "" // just the package's time
			}
			if lastPanic != "" {
				why = strings.TrimSpace(why + " " + lastPanic)
			}
			run.Failed = append(run.Failed, Failure{Status: "package failed", Reason: why})
			endBlock(m[1])
			continue
		}
		if m := endRE.FindStringSubmatch(raw); m != nil {
			endBlock(m[1])
			continue
		}
		if m := nameRE.FindStringSubmatch(line); m != nil {
			name(clean(m[1]))
		}
	}
	if len(run.Results) > results || len(run.Failed) > failed || blockPkg != "" {
		// A log cut short: the last block never ended.
		run.Failed = append(run.Failed, Failure{Status: "package failed", Reason: "the log ends before the package's result line"})
		endBlock(blockPkg)
	}
	return run, sc.Err()
}

// stamp sets the run's commit and date on every entry.
func (r *Run) stamp(commit string, date time.Time) {
	d := date.UTC().Format(time.RFC3339)
	for i := range r.Results {
		r.Results[i].Commit, r.Results[i].Date = commit, d
	}
	for i := range r.Failed {
		r.Failed[i].Commit, r.Failed[i].Date = commit, d
	}
}

// requireTargets adds a "missing" failure for each target figure the run
// did not record.
func (r *Run) requireTargets() {
	have := map[string]bool{}
	for _, e := range r.Results {
		have[e.Name] = true
	}
	for _, t := range targets {
		if t.required && !have[t.name] {
			r.Failed = append(r.Failed, Failure{Status: "missing", Name: t.name, Reason: "no benchmark recorded " + t.name})
		}
	}
}

// gitCommit is HEAD's short hash, with "-dirty" when the tree has changes.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if exec.Command("git", "diff-index", "--quiet", "HEAD", "--").Run() != nil {
		c += "-dirty"
	}
	return c
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func main() {
	out := flag.String("o", "", "write the figures here (bench-results.json); default stdout")
	failed := flag.String("failed", "", "write what failed here (bench-failed.json)")
	require := flag.Bool("require", false, "list every target figure of the issue that the run did not record as missing")
	readme := flag.String("readme", "", "rewrite this README's bench table from -results and -failed instead of reading a log")
	results := flag.String("results", "bench-results.json", "with -readme: the figures")
	procs := flag.Int("procs", runtime.GOMAXPROCS(0), "the -N suffix of benchmark names to strip (go test's GOMAXPROCS)")
	flag.Parse()
	if err := run(*out, *failed, *require, *readme, *results, *procs); err != nil {
		fmt.Fprintln(os.Stderr, "benchjson:", err)
		os.Exit(1)
	}
}

var errFailed = errors.New("some benchmarks failed or recorded no figure (see the failed list)")

func run(out, failed string, require bool, readme, results string, procs int) error {
	if readme != "" {
		var r Run
		if err := readJSON(results, &r.Results); err != nil {
			return err
		}
		if failed != "" {
			if err := readJSON(failed, &r.Failed); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		return rewriteReadme(readme, r)
	}
	r, err := parse(os.Stdin, procs)
	if err != nil {
		return err
	}
	if require {
		r.requireTargets()
	}
	r.stamp(gitCommit(), time.Now())
	if out == "" {
		b, err := json.MarshalIndent(r.Results, "", "  ")
		if err != nil {
			return err
		}
		os.Stdout.Write(append(b, '\n'))
	} else if err := writeJSON(out, r.Results); err != nil {
		return err
	}
	if failed != "" {
		if err := writeJSON(failed, r.Failed); err != nil {
			return err
		}
	}
	if out != "" {
		fmt.Print(summary(r))
	}
	if len(r.Failed) > 0 {
		return errFailed
	}
	return nil
}

// summary is the figures as text, for the console.
func summary(r Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bench-results: %d figures, %d failed\n", len(r.Results), len(r.Failed))
	for _, e := range r.Results {
		t := targetOf(e.Name)
		fmt.Fprintf(&b, "  %-48s %s  %s\n", e.Name, figure(e), verdict(e, t))
	}
	for _, f := range r.Failed {
		fmt.Fprintf(&b, "  %s: %s%s\n", strings.ToUpper(f.Status), failureName(f), firstLine(f.Reason))
	}
	return b.String()
}
