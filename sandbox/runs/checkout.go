package runs

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// DefaultGitURL is where repositories are cloned from unless
// Config.GitURL says otherwise.
const DefaultGitURL = "https://github.com"

// repositoryRE is a GitHub "owner/name".
var repositoryRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`)

// checkoutRepository is the repository a run checks out: its trigger's,
// else the workflow's when it names exactly one without a wildcard; ""
// for none, or when the workflow says checkout: false.
func checkoutRepository(r Run, def workflow.Definition) string {
	if !def.Checkouts() {
		return ""
	}
	if r.Repository != "" {
		return r.Repository
	}
	if len(def.Repositories) == 1 && !strings.Contains(def.Repositories[0], "*") {
		return def.Repositories[0]
	}
	return ""
}

// checkoutTokenSecret names the tenant secret the clone authenticates
// with: the workflow's GitHub token (notify.github.token_secret), which an
// admin scopes to the API host and the git host. "" clones anonymously.
func checkoutTokenSecret(def workflow.Definition) string {
	if def.Notify.GitHub != nil {
		return def.Notify.GitHub.TokenSecret
	}
	return ""
}

// checkoutScript clones into $STOCKADE_CHECKOUT_DIR. Everything it is told
// comes in the environment, never spliced into the command line. The token
// is the sandbox's placeholder for the secret, sent as git sends a token
// (Basic x-access-token:TOKEN); the egress gateway swaps it for the real
// value on the hosts the secret is scoped to. It is given per command
// (-c), so nothing of it is written into .git/config.
const checkoutScript = `set -eu
mkdir -p "$STOCKADE_CHECKOUT_DIR"
cd "$STOCKADE_CHECKOUT_DIR"
git init -q .
git remote add origin "$STOCKADE_CHECKOUT_URL"
if [ -n "${STOCKADE_CHECKOUT_SECRET:-}" ]; then
	auth=$(printf 'x-access-token:%s' "$(printenv "$STOCKADE_CHECKOUT_SECRET")" | base64 | tr -d '\n')
	set -- -c "http.extraHeader=Authorization: Basic $auth"
else
	set --
fi
if ! git "$@" fetch -q --depth=1 origin "$STOCKADE_CHECKOUT_TARGET"; then
	# A server that refuses fetching a commit by id: fetch the ref, then
	# check the commit out of it.
	[ -n "${STOCKADE_CHECKOUT_REF:-}" ] && [ "$STOCKADE_CHECKOUT_REF" != "$STOCKADE_CHECKOUT_TARGET" ] || exit 1
	echo "fetching $STOCKADE_CHECKOUT_REF instead"
	git "$@" fetch -q origin "$STOCKADE_CHECKOUT_REF"
	git checkout -q --detach "$STOCKADE_CHECKOUT_TARGET"
else
	git checkout -q --detach FETCH_HEAD
fi
git log -1 --format='checked out %H'
`

// checkout clones the run's repository into /workspace/<name> at its
// commit (else its ref, else the default branch) before the steps, through
// the egress gateway. It returns the directory, or why it failed.
func (e *Engine) checkout(ctx context.Context, r Run, def workflow.Definition, sb sandbox.Sandbox, repo string, log *Log) (string, string) {
	if !repositoryRE.MatchString(repo) || strings.Contains(repo, "..") {
		return "", fmt.Sprintf("checkout: %q is not a repository (owner/name)", repo)
	}
	secret := checkoutTokenSecret(def)
	if r.Untrusted() {
		// Anonymous: enough for a public repository, and nothing for
		// the fork's code to take.
		secret = ""
	}
	if secret != "" && !slices.Contains(sb.EnvKeys(), secret) {
		return "", fmt.Sprintf("checkout %s: secret %s is not available to sandboxes (create it, scope it to the git host %s, and grant it in the policy)",
			repo, secret, hostOf(e.cfg.GitURL))
	}
	target := r.SHA
	if target == "" {
		target = r.Ref
	}
	if target == "" {
		target = "HEAD"
	}
	dir := "/workspace/" + repo[strings.IndexByte(repo, '/')+1:]
	env := map[string]string{
		"STOCKADE_CHECKOUT_DIR": dir, "STOCKADE_CHECKOUT_URL": strings.TrimSuffix(e.cfg.GitURL, "/") + "/" + repo + ".git",
		"STOCKADE_CHECKOUT_TARGET": target, "STOCKADE_CHECKOUT_REF": r.Ref, "STOCKADE_CHECKOUT_SECRET": secret,
		// No terminal to ask on: a refused token fails at once.
		"GIT_TERMINAL_PROMPT": "0",
	}
	fmt.Fprintf(log, "==> checkout %s at %s into %s\n", repo, target, dir)
	capture := &bounded{max: 4 << 10}
	out := &lockedWriter{w: io.MultiWriter(log, capture)}
	res, err := e.sbx.Exec(ctx, actorFor(r), r.TenantID, sb.ID, sandbox.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", checkoutScript}, Cwd: "/workspace", Env: env,
	}, out, out)
	switch {
	case err != nil:
		return "", fmt.Sprintf("checkout %s: %v", repo, err)
	case res.ExitCode != 0:
		text, _ := capture.text()
		why := fmt.Sprintf("checkout %s at %s: exit code %d", repo, target, res.ExitCode)
		switch {
		case res.ExitCode == 127:
			why += " (the sandbox template needs git: the debian template has it)"
		case strings.Contains(text, "could not read Username") || strings.Contains(text, "Authentication failed"):
			why += fmt.Sprintf(" (the git host refused the credentials: is secret %q right, and scoped to %s?)", secret, hostOf(e.cfg.GitURL))
		}
		if tail := lastLines(text, 3); tail != "" {
			why += ": " + truncate(tail, 400)
		}
		return "", why
	}
	return dir, ""
}

// lastLines is the last n non-empty lines of s, joined with " / ".
func lastLines(s string, n int) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, " / ")
}

// hostOf is the host of a base URL, for messages.
func hostOf(base string) string {
	h := strings.TrimPrefix(strings.TrimPrefix(base, "https://"), "http://")
	if i := strings.IndexAny(h, "/"); i >= 0 {
		h = h[:i]
	}
	return h
}
