package views

import "time"

// EgressView is the egress events page: every connection a sandbox made
// through the gateway, allowed or denied, with the rule that decided.
type EgressView struct {
	// Sandbox, when set, narrows the list to that sandbox.
	Sandbox  string
	Decision string // "allow", "deny" or "" for both
	Rows     []EgressRow
	// Unavailable says why there is nothing to show, when the server runs
	// without the gateway.
	Unavailable string
}

// EgressRow is one connection.
type EgressRow struct {
	At            time.Time
	SandboxID     string
	Method        string
	Target        string // host:port
	Allowed       bool
	Rule          string
	Addr          string
	Status        int
	Error         string
	BytesUp       int64
	BytesDown     int64
	PolicyVersion int
	Intercepted   bool
	// Suppressed counts the sandbox's connections before this one that
	// the rate limit kept off the list (metered all the same).
	Suppressed int
	// SecretsReflected counts real secret values the gateway rewrote to
	// placeholders in the answer.
	SecretsReflected int64
}

func egressSandboxURL(id string) string { return "/sandboxes/" + id }

// EgressPageRows is how many decisions the egress page lists.
const EgressPageRows = 200

func egressDecisionWord(d string) string {
	switch d {
	case "allow":
		return "allowed "
	case "deny":
		return "denied "
	}
	return ""
}

func egressSandboxWords(sb string) string {
	if sb == "" {
		return ""
	}
	return "of sandbox " + sb + " "
}
