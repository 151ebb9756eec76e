package policy_test

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants/policy"
)

// TestFieldsCoverDoc: every setting of a document has exactly one field,
// so no diff line falls back to a bare JSON pointer.
func TestFieldsCoverDoc(t *testing.T) {
	raw, err := json.Marshal(policy.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	var tree map[string]any
	if err := json.Unmarshal(raw, &tree); err != nil {
		t.Fatal(err)
	}
	var leaves []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				walk(prefix+"/"+k, x)
			}
			return
		}
		leaves = append(leaves, prefix)
	}
	walk("", tree)
	var fields []string
	for _, s := range policy.Sections() {
		for _, f := range s.Fields {
			if !strings.HasPrefix(f.Path, "/"+s.Key+"/") {
				t.Errorf("Got(field %s in section %s); want it under /%s/", f.Path, s.Key, s.Key)
			}
			if f.Label == "" || strings.Contains(f.Label, "/") {
				t.Errorf("Got(label of %s) = %q; want words", f.Path, f.Label)
			}
			fields = append(fields, f.Path)
		}
	}
	sort.Strings(leaves)
	sort.Strings(fields)
	if !reflect.DeepEqual(fields, leaves) {
		t.Errorf("Got(field paths) = %v; want the document's leaves %v", fields, leaves)
	}
}

// TestDescribe: changes read as labels and values with their units; lists
// say what they gain and lose.
func TestDescribe(t *testing.T) {
	from := policy.Defaults()
	from.Resources.DefaultMemoryMiB = 512
	from.Network.Egress.Allow = []policy.Rule{{Domain: "api.github.com", Ports: []int{443}}}
	to := from
	to.Resources.DefaultMemoryMiB = 1024
	to.Network.Egress.Allow = []policy.Rule{{Domain: "registry.npmjs.org"}, {Domain: "api.github.com", Ports: []int{443, 8443}}}
	to.Lifetime.MaxTimeoutSeconds = 2 * 3600
	to.Lifetime.MaxIdleTimeoutSeconds = 0
	to.Filesystem.ReadOnlyRoot = false
	to.Filesystem.MaxFileBytes = 1000
	to.Credentials.Secrets = []string{"GITHUB_TOKEN"}
	to.Audit.RetentionDays = 1
	to.Process.Seccomp = "strict"
	to.IncidentResponse.RunbookURL = "https://wiki.acme.test/runbook"

	var got []string
	for _, r := range policy.Describe(policy.Diff(from, to)) {
		got = append(got, r.String())
	}
	want := []string{
		"Default memory: 512 MiB → 1024 MiB",
		"Max lifetime: 4 h → 2 h",
		"Max idle timeout: 1 h → 0 (up to the lifetime)",
		"Egress allowlist: + registry.npmjs.org, + api.github.com ports 443, 8443, − api.github.com port 443",
		"Read-only template root: yes → no",
		"Max file size through the API: 64 MiB → 1000 bytes",
		"Secrets granted: + GITHUB_TOKEN",
		"Seccomp profile: default → strict",
		"Keep audit events: 365 days → 1 day",
		"Runbook: none → https://wiki.acme.test/runbook",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Got(Describe) =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	reordered := to
	reordered.Network.Egress.Allow = []policy.Rule{to.Network.Egress.Allow[1], to.Network.Egress.Allow[0]}
	if got := policy.Describe(policy.Diff(to, reordered)); len(got) != 1 || got[0].String() != "Egress allowlist: same entries, new order" {
		t.Errorf("Got(Describe of a reordered list) = %v; want one line saying only the order changed", got)
	}
	if got := policy.Describe([]policy.Change{{Path: "/nowhere/x", Old: json.RawMessage(`1`), New: json.RawMessage(`2`)}}); got[0].Label != "/nowhere/x" || got[0].String() != "/nowhere/x: 1 → 2" {
		t.Errorf("Got(Describe of an unknown path) = %q; want the path and raw values", got[0].String())
	}
}
