package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// captured is `go test -run '^$' -bench . -benchtime 1x` output of three
// packages as go test prints it (figures before their benchmark's name):
// one fine, one with a failed benchmark, one killed by the timeout, then a
// build failure and a package without benchmarks.
const captured = `
bench-result: {"name":"sustained_tasks_c1_vs_raw","value":50,"unit":"tasks/min","baseline":100,"ratio":0.5}

bench-result: {"name":"sustained_tasks_c8_vs_raw","value":90,"unit":"tasks/min","baseline":100,"ratio":0.9}
goos: linux
goarch: amd64
pkg: github.com/stockade-dev/stockade/sandbox
cpu: Intel(R) Xeon(R) Processor
BenchmarkSustained-2   	       1	90000000000 ns/op	         0.9000 sustained_tasks_c8_vs_raw-ratio	         0.5000 p50-ratio
--- BENCH: BenchmarkSustained-2
    bench_sustained_test.go:11: a log line, bench-result: not a figure line of its own

bench-result: {"name":"idle_sandboxes_per_2gib_vm","value":300,"unit":"count"}
BenchmarkSandboxDensity-2  	       1	  241001 ns/op	       300.0 idle_sandboxes_per_2gib_vm-count
ok  	github.com/stockade-dev/stockade/sandbox	117.585s

bench-result: {"name":"terminal_echo_added_ms","value":1.5,"unit":"ms"}
goos: linux
pkg: github.com/stockade-dev/stockade/sandbox/terminal
--- FAIL: BenchmarkKeystrokeEcho
    bench_test.go:15: boom
        second line
    ok this is still the log
--- FAIL: BenchmarkWatchers-2
    bench_test.go:99: watchers cut
BenchmarkE2B/commands.run-true-2 	       1	 5 ns/op	 1.10 p50-ratio
FAIL
exit status 1
FAIL	github.com/stockade-dev/stockade/sandbox/terminal	35.1s
pkg: github.com/stockade-dev/stockade/sandbox/vmpool
panic: test timed out after 60m0s
	running tests:
		BenchmarkVMColdStart (60m0s)
FAIL	github.com/stockade-dev/stockade/sandbox/vmpool	3600.2s
# github.com/stockade-dev/stockade/web
web/x.go:1:1: syntax error
FAIL	github.com/stockade-dev/stockade/web [build failed]
?   	github.com/stockade-dev/stockade/views	[no test files]
ok  	github.com/stockade-dev/stockade/tenants	0.010s
FAIL
`

func TestParse(t *testing.T) {
	run, err := parse(strings.NewReader(captured), 2)
	if err != nil {
		t.Fatal(err)
	}
	type fig struct {
		name, pkg, bench string
		value            float64
		ratio            float64 // -1: none
	}
	const sbx, term = "github.com/stockade-dev/stockade/sandbox", "github.com/stockade-dev/stockade/sandbox/terminal"
	want := []fig{
		{"sustained_tasks_c1_vs_raw", sbx, "BenchmarkSustained", 50, 0.5},
		{"sustained_tasks_c8_vs_raw", sbx, "BenchmarkSustained", 90, 0.9},
		{"idle_sandboxes_per_2gib_vm", sbx, "BenchmarkSandboxDensity", 300, -1},
		{"terminal_echo_added_ms", term, "BenchmarkKeystrokeEcho", 1.5, -1},
	}
	if len(run.Results) != len(want) {
		t.Fatalf("Got(%d figures) = %+v; want %d", len(run.Results), run.Results, len(want))
	}
	for i, w := range want {
		g := run.Results[i]
		ratio := -1.0
		if g.Ratio != nil {
			ratio = *g.Ratio
		}
		if g.Name != w.name || g.Package != w.pkg || g.Benchmark != w.bench || g.Value != w.value || ratio != w.ratio {
			t.Errorf("Got(figure %d) = %s %s %s %v ratio %v; want %+v", i, g.Name, g.Package, g.Benchmark, g.Value, ratio, w)
		}
		if (g.Baseline == nil) != (w.ratio < 0) {
			t.Errorf("Got(%s baseline) = %v; want one only with a ratio", g.Name, g.Baseline)
		}
	}
	wantFailed := []Failure{
		{Status: "failed", Package: term, Benchmark: "BenchmarkKeystrokeEcho", Reason: "bench_test.go:15: boom\nsecond line\nok this is still the log"},
		{Status: "failed", Package: term, Benchmark: "BenchmarkWatchers", Reason: "bench_test.go:99: watchers cut"},
		{Status: "package failed", Package: term},
		{Status: "package failed", Package: "github.com/stockade-dev/stockade/sandbox/vmpool", Reason: "panic: test timed out after 60m0s"},
		{Status: "package failed", Package: "github.com/stockade-dev/stockade/web", Reason: "[build failed]"},
	}
	if len(run.Failed) != len(wantFailed) {
		t.Fatalf("Got(failed) = %+v; want %+v", run.Failed, wantFailed)
	}
	for i, w := range wantFailed {
		if run.Failed[i] != w {
			t.Errorf("Got(failed %d) = %+v; want %+v", i, run.Failed[i], w)
		}
	}
}

func TestParseBadAndCut(t *testing.T) {
	if _, err := parse(strings.NewReader("bench-result: {\"name\":\n"), 2); err == nil {
		t.Errorf("Got(parse of a broken figure line) = nil error; want one")
	}
	run, err := parse(strings.NewReader("ok  \tx/done\t1s\nbench-result: {\"name\":\"a\",\"value\":1,\"unit\":\"ms\"}\ngoos: linux\npkg: x/cut\nBenchmarkA-2\t"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Results) != 1 || run.Results[0].Package != "x/cut" || len(run.Failed) != 1 || run.Failed[0].Status != "package failed" || run.Failed[0].Package != "x/cut" {
		t.Errorf("Got(a log cut short) = %+v; want its figure and a package failure, both of x/cut", run)
	}
	run, err = parse(strings.NewReader("goos: linux\npkg: x/cut\n"), 2)
	if err != nil || len(run.Failed) != 1 || run.Failed[0].Package != "x/cut" {
		t.Errorf("Got(a log cut before any figure) = %+v, %v; want x/cut failed", run, err)
	}
}

func TestRequireAndVerdicts(t *testing.T) {
	run, err := parse(strings.NewReader(captured), 2)
	if err != nil {
		t.Fatal(err)
	}
	run.requireTargets()
	missing := map[string]bool{}
	for _, f := range run.Failed {
		if f.Status == "missing" {
			missing[f.Name] = true
		}
	}
	for _, n := range []string{"vm_restore_vs_cold_boot", "egress_vs_channel", "idle_sandbox_guest_mib"} {
		if !missing[n] {
			t.Errorf("Got(missing) = %v; want %s in it", missing, n)
		}
	}
	for _, n := range []string{"sustained_tasks_c8_vs_raw", "terminal_echo_added_ms", "sustained_tasks_c1_vs_raw"} {
		if missing[n] {
			t.Errorf("Got(missing) = %v; want no %s (recorded, or not one of the issue's)", missing, n)
		}
	}
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		e    Entry
		want string
	}{
		{Entry{Name: "sustained_tasks_c8_vs_raw", Value: 90, Baseline: f(100), Ratio: f(0.9)}, "met"},
		{Entry{Name: "sustained_tasks_c8_vs_raw", Value: 70, Baseline: f(100), Ratio: f(0.7)}, "NOT met"},
		{Entry{Name: "vm_restore_vs_cold_boot", Value: 1, Baseline: f(4), Ratio: f(0.25)}, "NOT met"},
		{Entry{Name: "vm_restore_vs_cold_boot", Value: 1, Baseline: f(5), Ratio: f(0.2)}, "met"},
		{Entry{Name: "idle_sandboxes_per_2gib_vm", Value: 300}, "met"},
		{Entry{Name: "idle_sandboxes_per_2gib_vm", Value: 64}, "NOT met"},
		{Entry{Name: "terminal_echo_added_ms", Value: 2.5}, "NOT met"},
		{Entry{Name: "sustained_tasks_c1_vs_raw", Value: 1, Baseline: f(2), Ratio: f(0.5)}, ""},
		{Entry{Name: "something_else", Value: 1}, ""},
	}
	for _, tt := range tests {
		if got := verdict(tt.e, targetOf(tt.e.Name)); got != tt.want {
			t.Errorf("Got(verdict(%s %v)) = %q; want %q", tt.e.Name, tt.e.Value, got, tt.want)
		}
	}
}

// TestFilesAndReadme runs the command's two modes on files: the log to
// bench-results.json and bench-failed.json (failing, since some did), then
// the README's table from them.
func TestFilesAndReadme(t *testing.T) {
	dir := t.TempDir()
	res, failed, readme := filepath.Join(dir, "bench-results.json"), filepath.Join(dir, "bench-failed.json"), filepath.Join(dir, "README.md")
	in, err := os.CreateTemp(dir, "log")
	if err != nil {
		t.Fatal(err)
	}
	in.WriteString(captured)
	in.Seek(0, 0)
	old := os.Stdin
	os.Stdin = in
	t.Cleanup(func() { os.Stdin = old })
	if err := run(res, failed, true, "", "", 2); err != errFailed {
		t.Errorf("Got(run of a log with failures) = %v; want %v", err, errFailed)
	}
	var entries []map[string]any
	b, _ := os.ReadFile(res)
	if err := json.Unmarshal(b, &entries); err != nil || len(entries) != 4 {
		t.Fatalf("Got(bench-results.json) = %s (%v); want a list of 4", b, err)
	}
	for _, k := range []string{"name", "value", "unit", "baseline", "ratio", "commit", "date"} {
		if _, ok := entries[0][k]; !ok {
			t.Errorf("Got(entry) = %v; want a %q key", entries[0], k)
		}
	}
	if d, _ := entries[0]["date"].(string); d == "" {
		t.Errorf("Got(date) = %q; want the run's", d)
	} else if _, err := time.Parse(time.RFC3339, d); err != nil {
		t.Errorf("Got(date) = %q; want RFC 3339", d)
	}
	if entries[2]["baseline"] != nil || entries[2]["ratio"] != nil {
		t.Errorf("Got(absolute figure) = %v; want null baseline and ratio", entries[2])
	}
	var fs []Failure
	b, _ = os.ReadFile(failed)
	if err := json.Unmarshal(b, &fs); err != nil || len(fs) < 5 {
		t.Fatalf("Got(bench-failed.json) = %s (%v); want the 5 failures and the missing figures", b, err)
	}

	doc := "# X\n\nbefore\n" + beginMarker + "\nold table\n" + endMarker + "\nafter\n"
	if err := os.WriteFile(readme, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("", failed, false, readme, res, 2); err != nil {
		t.Fatalf("Got(run -readme) = %v", err)
	}
	b, _ = os.ReadFile(readme)
	got := string(b)
	for _, want := range []string{
		"before\n" + beginMarker + "\n", endMarker + "\nafter\n",
		"| `sustained_tasks_c8_vs_raw` | sustained tasks/minute at concurrency 8 vs the raw crun loop in the VM | 90 tasks/min vs 100 tasks/min = 0.9x | >= 0.8x | met |",
		"| `idle_sandboxes_per_2gib_vm` | idle sandboxes per 2 GiB VM | 300 | >= 256 | met |",
		"| `terminal_echo_added_ms` | terminal echo added over a local PTY through the same code | 1.5 ms | <= 2 ms | met |",
		"| `vm_restore_vs_cold_boot` |", "not measured | <= 0.2x | missing |",
		"failed: github.com/stockade-dev/stockade/sandbox/terminal BenchmarkKeystrokeEcho: bench_test.go:15: boom",
		"package failed: github.com/stockade-dev/stockade/web: [build failed]\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Got(README) = %s; want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "old table") {
		t.Errorf("Got(README) = %s; want the old table replaced", got)
	}
	// Twice gives the same file.
	if err := run("", failed, false, readme, res, 2); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(readme); string(b2) != got {
		t.Errorf("Got(second -readme) = %s; want the same as the first", b2)
	}
	if err := os.WriteFile(readme, []byte("no markers"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("", failed, false, readme, res, 2); err == nil {
		t.Errorf("Got(-readme without markers) = nil; want an error")
	}
}

// TestTargets: every target's name is one benchrec accepts, named once,
// with its description; the ten are required.
func TestTargets(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9_]{0,79}$`)
	seen, required := map[string]bool{}, 0
	for _, tg := range targets {
		if !valid.MatchString(tg.name) || seen[tg.name] || tg.what == "" {
			t.Errorf("Got(target %+v); want a valid name used once, with what it measures", tg)
		}
		seen[tg.name] = true
		if tg.required {
			required++
		}
	}
	if required != 10 {
		t.Errorf("Got(%d required targets); want the issue's 10", required)
	}
}
