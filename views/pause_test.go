package views

import (
	"strings"
	"testing"
)

// TestSandboxPagePause: a running sandbox offers Pause to those who may
// edit; a paused one says so, to everyone, and offers Resume instead; an
// ended one offers neither.
func TestSandboxPagePause(t *testing.T) {
	at := sampleTime("2026-11-30T10:00:30Z")
	for _, c := range []struct {
		name          string
		state         string
		paused, edit  bool
		pause, resume bool
		pausedNotice  bool
	}{
		{name: "running, editor", state: "running", edit: true, pause: true},
		{name: "running, read-only", state: "running"},
		{name: "paused, editor", state: "running", paused: true, edit: true, resume: true, pausedNotice: true},
		{name: "paused, read-only", state: "running", paused: true, pausedNotice: true},
		{name: "destroyed", state: "destroyed", paused: true, edit: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := sampleSandboxView(c.edit)
			v.Row.State = c.state
			if c.paused {
				v.Row.PausedAt = &at
			}
			doc := parse(t, render(t, SandboxPage(samplePageModel("Sandbox", NavSandboxes), v)))
			for _, f := range []struct {
				testID string
				want   bool
			}{{"sandbox-pause", c.pause}, {"sandbox-resume", c.resume}, {"sandbox-paused", c.pausedNotice}} {
				if got := byTestID(doc, f.testID) != nil; got != f.want {
					t.Errorf("Got([data-testid=%s] present) = %v; want %v", f.testID, got, f.want)
				}
			}
			if c.pausedNotice {
				if got := textOf(t, doc, "sandbox-paused"); !strings.Contains(got, "billed for memory only") {
					t.Errorf("Got(paused notice) = %q; want it to say what a pause bills", got)
				}
			}
		})
	}
}
