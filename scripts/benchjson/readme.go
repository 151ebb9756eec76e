package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// target is what a figure should reach: on its ratio (Value/Baseline) or,
// for an absolute figure, on its value.
type target struct {
	name string
	what string
	// max or min bound the ratio, or the value when onValue; NaN when unset.
	max, min float64
	onValue  bool
	unit     string // of an absolute target
	// required: one of issue 20's figures, which `make bench` must record.
	required bool
}

func none() float64 { return math.NaN() }

// targets lists the figures in the README table's order: issue 20's first
// (its acceptance table), then the other benchmarks' named figures.
var targets = []target{
	{name: "vm_restore_vs_cold_boot", what: "VM restore from a memory snapshot -> agent ready, vs cold boot -> agent ready", max: 0.2, min: none(), required: true},
	{name: "create_first_output_empty_pool_vs_cold_boot", what: "empty warm pool: create -> first output, vs cold boot -> first output", max: 0.3, min: none(), required: true},
	{name: "create_first_output_prestarted_vs_crun_run", what: "create -> first output with a pre-started sandbox, vs raw `crun run` in the VM", max: 0.5, min: none(), required: true},
	{name: "exec_true_vs_floor", what: "exec of `true` through the API vs the floor (fork+exec in the guest + one agent-channel round trip)", max: 2, min: none(), required: true},
	{name: "terminal_echo_added_ms", what: "terminal echo added over a local PTY through the same code", max: 2, min: none(), onValue: true, unit: "ms", required: true},
	{name: "gateway_host_vs_direct", what: "host gateway download vs direct", max: none(), min: 0.9, required: true},
	{name: "idle_sandboxes_per_2gib_vm", what: "idle sandboxes per 2 GiB VM", max: none(), min: 256, onValue: true, required: true},
	{name: "idle_sandbox_guest_mib", what: "guest memory per idle sandbox", max: 1, min: none(), onValue: true, unit: "MiB", required: true},
	{name: "egress_vs_channel", what: "egress inside a sandbox vs agent-channel file read", max: none(), min: 0.9, required: true},
	{name: "sustained_tasks_c8_vs_raw", what: "sustained tasks/minute at concurrency 8 vs the raw crun loop in the VM", max: none(), min: 0.8, required: true},
	{name: "freed_guest_memory_returned_ratio", what: "guest memory freed by idle sandboxes' exit that free page reporting returned to the host (MiB returned vs freed)", max: none(), min: none()},
	{name: "sustained_tasks_c4_vs_raw", what: "sustained tasks/minute at concurrency 4 vs the raw crun loop", max: none(), min: none()},
	{name: "sustained_tasks_c1_vs_raw", what: "sustained tasks/minute at concurrency 1 vs the raw crun loop", max: none(), min: none()},
	{name: "vm_cold_start_vs_busybox", what: "VM cold start, define -> agent handshake, vs a busybox-init guest", max: none(), min: none()},
	{name: "warm_acquire_p50_ms", what: "warm-pool acquire (no boot on the request path), p50", max: none(), min: none(), onValue: true},
	{name: "port_http_vs_inside", what: "HTTP to a sandbox port through the host vs from inside the VM, p50", max: none(), min: none()},
	{name: "node_startup_vs_true", what: "`node -e 0` in a sandbox vs `true`, p50", max: none(), min: none()},
	{name: "e2b_commands_run_vs_exec", what: "E2B SDK `commands.run('true')` vs native exec of the same argv, p50", max: 1.2, min: none()},
	{name: "e2b_files_vs_native", what: "E2B SDK 1 MiB write+read vs native PUT+GET, p50", max: none(), min: none()},
	{name: "create_tenant_template_vs_builtin", what: "create from a tenant template vs from the busybox built-in, p50", max: 1.1, min: none()},
	{name: "recipe_build_vs_debootstrap", what: "template recipe build vs debootstrap of the same root", max: none(), min: none()},
	{name: "nonowner_first_output_vs_owner", what: "create -> first output through a non-owner replica vs the owner", max: 1.1, min: none()},
	{name: "nonowner_exec_first_output_vs_owner", what: "exec -> first output through a non-owner replica vs the owner", max: 1.1, min: none()},
	{name: "failover_s", what: "replica killed -> its VMs' agent sessions taken over", max: 15, min: none(), onValue: true, unit: "s"},
	{name: "placement_2_hosts_vs_1", what: "create throughput over two hosts vs one", max: none(), min: none()},
	{name: "usage_export_csv_vs_scan", what: "usage export of 1,000,000 ledger rows (CSV) vs a plain SELECT scan, rows/s", max: none(), min: none()},
}

func targetOf(name string) target {
	for _, t := range targets {
		if t.name == name {
			return t
		}
	}
	return target{name: name, max: none(), min: none()}
}

// num formats v with three significant digits at most (all of the
// integer part).
func num(v float64) string {
	if math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func withUnit(v float64, unit string) string {
	if unit == "" || unit == "count" {
		return num(v)
	}
	return num(v) + " " + unit
}

// figure is an entry's value, against its baseline when it has one.
func figure(e Entry) string {
	if e.Baseline == nil || e.Ratio == nil {
		return withUnit(e.Value, e.Unit)
	}
	return fmt.Sprintf("%s vs %s = %sx", withUnit(e.Value, e.Unit), withUnit(*e.Baseline, e.Unit), num(*e.Ratio))
}

// want is the target as text ("<= 0.2x", ">= 256").
func (t target) want() string {
	x := "x"
	if t.onValue {
		x = ""
		if t.unit != "" {
			x = " " + t.unit
		}
	}
	switch {
	case !math.IsNaN(t.max):
		return "<= " + num(t.max) + x
	case !math.IsNaN(t.min):
		return ">= " + num(t.min) + x
	}
	return ""
}

// verdict is "met", "NOT met" or "" (no target) for e.
func verdict(e Entry, t target) string {
	v := e.Value
	if !t.onValue {
		if e.Ratio == nil {
			return ""
		}
		v = *e.Ratio
	}
	switch {
	case math.IsNaN(t.max) && math.IsNaN(t.min):
		return ""
	case !math.IsNaN(t.max) && v > t.max, !math.IsNaN(t.min) && v < t.min:
		return "NOT met"
	}
	return "met"
}

func failureName(f Failure) string {
	switch {
	case f.Benchmark != "":
		return f.Package + " " + f.Benchmark
	case f.Name != "":
		return f.Name
	}
	return f.Package
}

// Markers around the generated table in README.md.
const (
	beginMarker = "<!-- bench-table:begin (made by `make bench` from bench-results.json: scripts/benchjson -readme) -->"
	endMarker   = "<!-- bench-table:end -->"
)

// table is the README's bench table for r: the targets first, then
// every other figure; then what failed.
func table(r Run) string {
	byName := map[string][]Entry{}
	var others []string
	commits, dates := map[string]bool{}, map[string]bool{}
	for _, e := range r.Results {
		if _, ok := byName[e.Name]; !ok && !targetOf(e.Name).known() {
			others = append(others, e.Name)
		}
		byName[e.Name] = append(byName[e.Name], e)
		commits[e.Commit], dates[e.Date] = true, true
	}
	for _, f := range r.Failed {
		commits[f.Commit], dates[f.Date] = true, true
	}
	sort.Strings(others)
	var b strings.Builder
	fmt.Fprintf(&b, "Run of %s at commit %s: %d figures, %d failed or missing. Each ratio is against a baseline measured in the same run.\n\n",
		joinKeys(dates), joinKeys(commits), len(r.Results), len(r.Failed))
	b.WriteString("| figure | what | measured | target | |\n|---|---|---|---|---|\n")
	row := func(t target) {
		es := byName[t.name]
		if len(es) == 0 {
			if t.required {
				fmt.Fprintf(&b, "| `%s` | %s | not measured | %s | missing |\n", t.name, t.what, t.want())
			}
			return
		}
		for _, e := range es {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", t.name, t.what, figure(e), t.want(), verdict(e, t))
		}
	}
	for _, t := range targets {
		row(t)
	}
	for _, n := range others {
		row(target{name: n, what: "(" + byName[n][0].Benchmark + ")", max: none(), min: none()})
	}
	if len(r.Failed) > 0 {
		b.WriteString("\nFailed or missing in this run:\n\n")
		for _, f := range r.Failed {
			fmt.Fprintf(&b, "- %s: %s%s\n", f.Status, failureName(f), firstLine(f.Reason))
		}
	}
	return b.String()
}

func (t target) known() bool {
	for _, k := range targets {
		if k.name == t.name {
			return true
		}
	}
	return false
}

func joinKeys(m map[string]bool) string {
	var ks []string
	for k := range m {
		if k != "" {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	if len(ks) == 0 {
		return "?"
	}
	return strings.Join(ks, ", ")
}

// spliceTable puts the table between the markers of doc.
func spliceTable(doc []byte, tbl string) ([]byte, error) {
	i := bytes.Index(doc, []byte(beginMarker))
	j := bytes.Index(doc, []byte(endMarker))
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %q ... %q markers", beginMarker, endMarker)
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(beginMarker)])
	out.WriteString("\n" + tbl)
	out.Write(doc[j:])
	return out.Bytes(), nil
}

func rewriteReadme(path string, r Run) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := spliceTable(doc, table(r))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// firstLine is ": " and the first line of s, or "".
func firstLine(s string) string {
	if s == "" {
		return ""
	}
	return ": " + strings.SplitN(s, "\n", 2)[0]
}
