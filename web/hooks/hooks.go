// Package hooks is a compatibility shim: the GitHub receiver moved to
// handlers/github (web only mounts it). These names are aliases, kept so
// code written against the old path still compiles; a later sweep removes
// the package.
package hooks

import (
	"github.com/stockade-dev/stockade/handlers/github"
	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// Aliases of handlers/github.
type (
	GitHub    = github.Receiver
	Answer    = github.Answer
	Tenants   = github.Tenants
	Workflows = github.Workflows
	Secrets   = github.Secrets
	Runs      = github.Runs
	Starter   = github.Starter
)

// SecretHost is github.SecretHost.
const SecretHost = github.SecretHost

// MaxBody is github.MaxBody.
const MaxBody = github.MaxBody

// Sign is github.Sign.
func Sign(secret, body []byte) string { return github.Sign(secret, body) }

// Verify is github.Verify.
func Verify(secret []byte, header string, body []byte) bool { return github.Verify(secret, header, body) }

// Parse is github.Parse.
func Parse(event string, body []byte) (workflow.Event, runs.Trigger, error) { return github.Parse(event, body) }
