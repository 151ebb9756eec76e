package terminal_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/terminal"
)

// TestHubEnding: a session told why its process is about to be killed
// from outside (its sandbox is being destroyed by a freeze) ends with that
// reason when the process goes, not with what the broken stream says; one
// told and then told "" (the destroy failed) ends as it would have.
func TestHubEnding(t *testing.T) {
	const why = "the sandbox was destroyed: its tenant was frozen by a platform operator"
	cases := []struct {
		name    string
		ending  []string
		want    string
		notWant string
	}{
		{"told", []string{why}, why, ""},
		{"told and taken back", []string{why, ""}, "", why},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := startPTY(t, "sh", "-c", "sleep 30")
			h := terminal.NewHub(p, terminal.HubConfig{ID: "ending-" + c.name})
			for _, r := range c.ending {
				h.Ending(r)
			}
			p.Close() // the process goes from outside, as an agent's destroy kills it
			select {
			case <-h.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("Got(session still live 30 s after its process was killed); want it ended")
			}
			got := h.Ended().Reason
			if c.want != "" && got != c.want {
				t.Errorf("Got(end reason) = %q; want %q", got, c.want)
			}
			if c.notWant != "" && strings.Contains(got, c.notWant) {
				t.Errorf("Got(end reason) = %q; want not the reason taken back", got)
			}
		})
	}
}
