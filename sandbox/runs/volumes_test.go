package runs

import (
	"reflect"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// TestRunVolumes: a run's sandbox gets the workflow's volumes, and an
// untrusted trigger (a fork's pull request) gets every one read-only, so
// it cannot poison a cache trusted runs read.
func TestRunVolumes(t *testing.T) {
	in := []workflow.Volume{{Name: "npm-cache", Path: "/home/sandbox/.npm"}, {Name: "repo", Path: "/workspace/repo", ReadOnly: true}}
	for _, tt := range []struct {
		name      string
		untrusted bool
		want      []volumes.Request
	}{
		{"trusted", false, []volumes.Request{{Name: "npm-cache", Path: "/home/sandbox/.npm"}, {Name: "repo", Path: "/workspace/repo", ReadOnly: true}}},
		{"fork pull request", true, []volumes.Request{{Name: "npm-cache", Path: "/home/sandbox/.npm", ReadOnly: true}, {Name: "repo", Path: "/workspace/repo", ReadOnly: true}}},
	} {
		if got := runVolumes(in, tt.untrusted); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Got(runVolumes) = %+v; want %+v", tt.name, got, tt.want)
		}
	}
	if got := runVolumes(nil, true); got != nil {
		t.Errorf("Got(runVolumes(nil)) = %v; want nil", got)
	}
}
