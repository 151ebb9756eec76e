package workflow_test

import (
	"reflect"
	"testing"

	"github.com/stockade-dev/stockade/tenants/workflow"
)

// TestParseVolumes: a workflow names tenant volumes to mount; a path that
// is not absolute, an unknown key and too many volumes are refused naming
// the field and line.
func TestParseVolumes(t *testing.T) {
	p := parser(t)
	base := "name: a\ntriggers:\n  - event: manual\nsteps:\n  - {name: s, run: npm ci}\n"
	d, err := p.Parse([]byte(base + "volumes:\n  - {name: npm-cache, path: /home/sandbox/.npm}\n  - {name: repo, path: /workspace/repo, read_only: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []workflow.Volume{{Name: "npm-cache", Path: "/home/sandbox/.npm"}, {Name: "repo", Path: "/workspace/repo", ReadOnly: true}}
	if !reflect.DeepEqual(d.Volumes, want) {
		t.Errorf("Got(Volumes) = %+v; want %+v", d.Volumes, want)
	}
	for _, tt := range []struct {
		name, src string
		want      []string
	}{
		{"relative path", "volumes:\n  - {name: c, path: cache}\n", []string{"/volumes/0/path@7"}},
		{"bad name", "volumes:\n  - {name: Cache, path: /c}\n", []string{"/volumes/0/name@7"}},
		{"unknown key", "volumes:\n  - {name: c, path: /c, mode: rw}\n", []string{"/volumes/0/mode@7"}},
		{"no path", "volumes:\n  - {name: c}\n", []string{"/volumes/0/path@7"}},
		{"too many", "volumes: [" + repeat("{name: c, path: /c}, ", 8) + "{name: c, path: /c}]\n", []string{"/volumes@6"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Parse([]byte(base + tt.src))
			if err == nil {
				t.Fatalf("Parse = nil; want errors %v", tt.want)
			}
			if got := fieldLines(t, err); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse fields = %v; want %v (%v)", got, tt.want, err)
			}
		})
	}
}

func repeat(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}
