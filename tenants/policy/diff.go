package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Change is one setting that differs between two documents. Lists are
// compared whole: Old and New hold the JSON values.
type Change struct {
	Path string          `json:"path"` // JSON pointer, e.g. /network/egress/allow
	Old  json.RawMessage `json:"old"`
	New  json.RawMessage `json:"new"`
}

// Diff lists the settings that differ from a to b, sorted by path.
func Diff(a, b Doc) []Change {
	a.normalize()
	b.normalize()
	fa, fb := flatten(a), flatten(b)
	var out []Change
	for p, va := range fa {
		if vb := fb[p]; !bytes.Equal(va, vb) {
			out = append(out, Change{Path: p, Old: va, New: vb})
		}
	}
	for p, vb := range fb {
		if _, ok := fa[p]; !ok {
			out = append(out, Change{Path: p, Old: json.RawMessage("null"), New: vb})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// flatten maps each leaf of d (scalars and whole lists) to its JSON.
func flatten(d Doc) map[string]json.RawMessage {
	raw, _ := json.Marshal(d) // a Doc always encodes
	var tree map[string]any
	_ = json.Unmarshal(raw, &tree)
	out := map[string]json.RawMessage{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				walk(prefix+"/"+k, x)
			}
			return
		}
		b, _ := json.Marshal(v)
		out[prefix] = b
	}
	walk("", tree)
	return out
}

// Running is what Preview needs of a running sandbox.
type Running struct {
	ID                 string
	VCPUs              int
	MemoryMiB          int
	TimeoutSeconds     int
	IdleTimeoutSeconds int
	PolicyVersion      int
}

// Preview says, before saving to, what changes for the running sandboxes
// and for new ones: one sentence each.
func Preview(from, to Doc, running []Running) []string {
	changes := Diff(from, to)
	if len(changes) == 0 {
		return []string{"Nothing changes: the document is the same."}
	}
	sections := map[string]bool{}
	for _, c := range changes {
		sections[strings.SplitN(strings.TrimPrefix(c.Path, "/"), "/", 2)[0]] = true
	}
	n := len(running)
	var out []string
	if sections["network"] {
		out = append(out, fmt.Sprintf("Egress rules change for %s within seconds: the gateway reads the policy for every connection.", count(n, "running sandbox", "running sandboxes")))
	}
	if sections["credentials"] {
		out = append(out, fmt.Sprintf("Credentials: %s keep the variables they started with; new sandboxes get the new list.", count(n, "running sandbox", "running sandboxes")))
	}
	if sections["resources"] || sections["lifetime"] {
		over := 0
		for _, r := range running {
			var why []string
			if r.VCPUs > to.Resources.MaxVCPUs {
				why = append(why, fmt.Sprintf("%d vCPUs > %d", r.VCPUs, to.Resources.MaxVCPUs))
			}
			if r.MemoryMiB > to.Resources.MaxMemoryMiB {
				why = append(why, fmt.Sprintf("%d MiB > %d", r.MemoryMiB, to.Resources.MaxMemoryMiB))
			}
			if r.TimeoutSeconds > to.Lifetime.MaxTimeoutSeconds {
				why = append(why, fmt.Sprintf("lifetime %d s > %d", r.TimeoutSeconds, to.Lifetime.MaxTimeoutSeconds))
			}
			if to.Lifetime.MaxIdleTimeoutSeconds > 0 && r.IdleTimeoutSeconds > to.Lifetime.MaxIdleTimeoutSeconds {
				why = append(why, fmt.Sprintf("idle timeout %d s > %d", r.IdleTimeoutSeconds, to.Lifetime.MaxIdleTimeoutSeconds))
			}
			if len(why) > 0 {
				over++
				out = append(out, fmt.Sprintf("Sandbox %s is over the new limits (%s): it keeps running as it started.", r.ID, strings.Join(why, ", ")))
			}
		}
		out = append(out, fmt.Sprintf("Resource and lifetime limits apply to sandboxes created from now on; %s over them.", count(over, "running sandbox is", "running sandboxes are")))
	}
	var rest []string
	for _, s := range []string{"filesystem", "process", "cleanup", "audit", "incident_response"} {
		if sections[s] {
			rest = append(rest, SectionTitle(s))
		}
	}
	if len(rest) > 0 {
		out = append(out, fmt.Sprintf("Changes to %s apply to sandboxes created from now on.", strings.Join(rest, ", ")))
	}
	if sections[VMPoolSection] {
		out = append(out, "The document's vm_pool section changes nothing: the VM pool runs by the pool settings of the VMs page.")
	}
	return out
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
