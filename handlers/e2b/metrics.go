package e2b

import (
	"net/http"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
)

// cpuSample is a sandbox's cumulative CPU time at a moment.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

// cpuSamples keeps each sandbox's previous sample, so that a metrics call
// answers the CPU share since the previous one (the first: since start).
type cpuSamples struct {
	mu   sync.Mutex
	last map[string]cpuSample
}

// share is the percent of its vCPUs sb used between the previous sample
// and now (cpu in total).
func (c *cpuSamples) share(sb sandbox.Sandbox, now time.Time, cpu time.Duration) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]cpuSample{}
	}
	prev, ok := c.last[sb.ID]
	if !ok && sb.StartedAt != nil {
		prev = cpuSample{at: *sb.StartedAt}
	}
	c.last[sb.ID] = cpuSample{at: now, cpu: cpu}
	wall := now.Sub(prev.at)
	if wall <= 0 || cpu < prev.cpu {
		return 0
	}
	pct := 100 * float64(cpu-prev.cpu) / (float64(wall) * float64(max(sb.VCPUs, 1)))
	return min(pct, 100) // the guest's figures are its claim: bounded
}

// metrics answers E2B's getMetrics: one point, now, from the sandbox's
// cgroup as its agent reports it (an empty list while none comes).
func (s *Server) metrics(c apiCall) error {
	return s.withActive(c, func(sb sandbox.Sandbox) error {
		st, err := s.sbx.Get(c.r.Context(), sb.TenantID, sb.ID)
		if err != nil {
			return err
		}
		out := []map[string]any{}
		if st.Stats != nil {
			now := s.now()
			memTotal := st.Stats.MemoryMax
			if memTotal == 0 || memTotal > uint64(sb.MemoryMiB)<<20 {
				memTotal = uint64(sb.MemoryMiB) << 20
			}
			out = append(out, map[string]any{
				"timestamp": now.UTC().Format(time.RFC3339), "timestampUnix": now.Unix(),
				"cpuUsedPct": s.cpu.share(sb, now, st.Stats.CPUUsage), "cpuCount": max(sb.VCPUs, 1),
				"memUsed": min(st.Stats.MemoryCurrent, memTotal), "memTotal": memTotal, "memCache": 0,
				"diskUsed": 0, "diskTotal": 0,
			})
		}
		writeJSON(c.w, http.StatusOK, out)
		return nil
	})
}
