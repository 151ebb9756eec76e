package agent

import (
	"fmt"
	"os"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// guestCapacity is the default MaxSandboxes: the capacity rule of
// agentproto applied to this guest's MemTotal, the rule the host plans
// placement with.
func guestCapacity(meminfo string) (int, error) {
	b, err := os.ReadFile(meminfo)
	if err != nil {
		return 0, fmt.Errorf("sandbox capacity: %w", err)
	}
	total, _, err := parseMeminfo(string(b))
	if err != nil {
		return 0, fmt.Errorf("sandbox capacity: %w", err)
	}
	return agentproto.SandboxCapacity(int(total >> 20)), nil
}
