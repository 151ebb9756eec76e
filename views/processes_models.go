package views

import (
	"strconv"
	"time"
)

// ProcessRow is a process of the process API on its sandbox's page.
type ProcessRow struct {
	PID         uint32
	Command     []string
	Tag         string
	State       string // running, exited, lost
	ExitCode    *int
	Signal      string
	Reason      string
	StartedBy   string
	StartedAt   time.Time
	OutputBytes int64
	TTY         bool
}

// SandboxProcesses are the processes a sandbox page lists: the running
// ones, then the latest ended.
type SandboxProcesses struct {
	Rows []ProcessRow
}

func (s SandboxProcesses) running() int {
	n := 0
	for _, r := range s.Rows {
		if r.State == "running" {
			n++
		}
	}
	return n
}

func processCount(running, all int) string {
	return strconv.Itoa(running) + " running, " + strconv.Itoa(all-running) + " ended"
}

func processPill(r ProcessRow) string {
	switch {
	case r.State == "running":
		return "pill pill-warn"
	case r.ExitCode != nil && *r.ExitCode == 0:
		return "pill pill-good"
	}
	return "pill pill-bad"
}

func processLabel(r ProcessRow) string {
	switch {
	case r.State == "running":
		return "running"
	case r.ExitCode != nil && r.Signal != "":
		return "exit " + strconv.Itoa(*r.ExitCode) + " (" + r.Signal + ")"
	case r.ExitCode != nil:
		return "exit " + strconv.Itoa(*r.ExitCode)
	}
	return r.State
}
