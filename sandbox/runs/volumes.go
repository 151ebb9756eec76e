package runs

import (
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// runVolumes are the volumes a run's sandbox mounts: each read-only for an
// untrusted trigger (a fork's pull request), which must not write what
// trusted runs read (a poisoned dependency cache).
func runVolumes(in []workflow.Volume, untrusted bool) []volumes.Request {
	if len(in) == 0 {
		return nil
	}
	out := make([]volumes.Request, len(in))
	for i, v := range in {
		out[i] = volumes.Request{Name: v.Name, Path: v.Path, ReadOnly: v.ReadOnly || untrusted}
	}
	return out
}
