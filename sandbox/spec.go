package sandbox

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/tenants/clip"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Spec is what a sandbox is asked for. Zero values take the defaults of the
// service's Config.
type Spec struct {
	Template  string
	VCPUs     int
	MemoryMiB int
	// TimeoutSeconds is the wall-clock lifetime: the sandbox is destroyed
	// (reason "timeout") when it passes.
	TimeoutSeconds int
	// IdleTimeoutSeconds stops the sandbox when no command ran and no file
	// moved for that long; 0 means none.
	IdleTimeoutSeconds int
	// Env is added to every command's environment. Only the names are
	// stored; the values go to the VM alone.
	Env      map[string]string
	Metadata map[string]string
	// IdempotencyKey is the create's Idempotency-Key, stored with the
	// sandbox as it is recorded, before any VM work: a retry after a server
	// crash finds the sandbox by it.
	IdempotencyKey string
	// NoSecrets gives the sandbox no secret placeholders, whatever the
	// tenant policy grants: it is for code nobody vouches for (a workflow
	// run from a fork's pull request).
	NoSecrets bool
	// Volumes are the tenant's volumes mounted into the sandbox
	// (sandbox/volumes; Config.Volumes).
	Volumes []volumes.Request
	// Builder is a template build's temporary image (never from the API):
	// the sandbox runs from it instead of a template by name
	// (sandbox/templates/recipe's setup step).
	Builder *templates.Version
}

// Bounds of a Spec.
const (
	MinMemoryMiB      = 16
	MaxTimeoutSeconds = 7 * 24 * 3600
	maxEnvVars        = 64
	maxEnvBytes       = 64 << 10
	maxMetadata       = 32
	maxMetadataKey    = 64
	maxMetadataValue  = 512
)

var (
	envKeyRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	metadataKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]*$`)
)

// limits is a validated Spec with every default filled in.
type limits struct {
	Spec
	TemplateVersion string
}

// resolve checks the spec against the templates that are built, the size of
// the tenant's VMs and the bounds of cfg, and fills the defaults. Every
// failure is a *errdefs.FieldError naming the field.
func (sp Spec) resolve(cfg Config, tpls []image.Template, pool vmpool.Pool) (limits, error) {
	out := limits{Spec: sp.withDefaults(cfg, tpls, pool, true)}
	tpl, ok := findTemplate(tpls, out.Template)
	if !ok {
		names := make([]string, 0, len(tpls))
		for _, t := range tpls {
			names = append(names, t.Name)
		}
		detail := fmt.Sprintf("no template %q; available: %s", truncate(out.Template, 64), strings.Join(names, ", "))
		if len(names) == 0 {
			detail = fmt.Sprintf("no template %q: no templates are built (stockade image build)", truncate(out.Template, 64))
		}
		return limits{}, errdefs.Invalid("template", "unknown", detail)
	}
	out.TemplateVersion = tpl.Version

	maxMem := pool.MemoryMiB - cfg.GuestReserveMiB
	switch {
	case out.VCPUs < 1:
		return limits{}, errdefs.Invalid("vcpus", "range", "must be at least 1")
	case out.VCPUs > pool.VCPUs:
		return limits{}, errdefs.Invalid("vcpus", "vm_size",
			fmt.Sprintf("must be at most %d: the tenant's VMs have %d vCPUs (VM pool settings)", pool.VCPUs, pool.VCPUs))
	case out.MemoryMiB < MinMemoryMiB:
		return limits{}, errdefs.Invalid("memory_mib", "range", fmt.Sprintf("must be at least %d", MinMemoryMiB))
	case out.MemoryMiB > maxMem:
		return limits{}, errdefs.Invalid("memory_mib", "vm_size",
			fmt.Sprintf("must be at most %d: the tenant's VMs have %d MiB, %d of them for the guest itself (VM pool settings)",
				max(maxMem, 0), pool.MemoryMiB, cfg.GuestReserveMiB))
	case out.TimeoutSeconds < 1 || out.TimeoutSeconds > MaxTimeoutSeconds:
		return limits{}, errdefs.Invalid("timeout_seconds", "range", fmt.Sprintf("must be between 1 and %d (a week)", MaxTimeoutSeconds))
	case out.IdleTimeoutSeconds < 0 || out.IdleTimeoutSeconds > out.TimeoutSeconds:
		return limits{}, errdefs.Invalid("idle_timeout_seconds", "range", "must be between 0 (none) and timeout_seconds")
	}
	if err := checkEnv("env", out.Env); err != nil {
		return limits{}, err
	}
	if len(out.Metadata) > maxMetadata {
		return limits{}, errdefs.Invalid("metadata", "size", fmt.Sprintf("at most %d keys", maxMetadata))
	}
	for k, v := range out.Metadata {
		if len(k) > maxMetadataKey || !metadataKeyRE.MatchString(k) {
			return limits{}, errdefs.Invalid("metadata", "key", fmt.Sprintf("key %q: 1-%d of letters, digits and _.:/- starting with a letter or digit", truncate(k, 80), maxMetadataKey))
		}
		if len(v) > maxMetadataValue || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return limits{}, errdefs.Invalid("metadata", "value", fmt.Sprintf("value of %q: at most %d bytes of text", k, maxMetadataValue))
		}
	}
	return out, nil
}

// withDefaults fills what sp leaves zero: cfg's template (or the first
// built when that one is not), one vCPU, cfg's memory (within the tenant's
// VMs when their size is known) and cfg's lifetime. Create and the create
// form's defaults (CreateOptions) both come from here.
func (sp Spec) withDefaults(cfg Config, tpls []image.Template, pool vmpool.Pool, sized bool) Spec {
	if sp.Template == "" {
		sp.Template = cfg.DefaultTemplate
		if _, ok := findTemplate(tpls, sp.Template); !ok && len(tpls) > 0 {
			sp.Template = tpls[0].Name
		}
	}
	if sp.VCPUs == 0 {
		sp.VCPUs = 1
	}
	if sp.MemoryMiB == 0 {
		sp.MemoryMiB = cfg.DefaultMemoryMiB
		if sized {
			sp.MemoryMiB = min(sp.MemoryMiB, pool.MemoryMiB-cfg.GuestReserveMiB)
		}
	}
	if sp.TimeoutSeconds == 0 {
		sp.TimeoutSeconds = cfg.DefaultTimeoutSeconds
	}
	return sp
}

// checkEnv checks environment variables given as a map under field.
func checkEnv(field string, env map[string]string) error {
	if len(env) > maxEnvVars {
		return errdefs.Invalid(field, "size", fmt.Sprintf("at most %d variables", maxEnvVars))
	}
	size := 0
	for k, v := range env {
		if !envKeyRE.MatchString(k) {
			return errdefs.Invalid(field, "key", fmt.Sprintf("name %q: letters, digits and _, not starting with a digit", truncate(k, 80)))
		}
		if strings.ContainsRune(v, 0) {
			return errdefs.Invalid(field, "value", fmt.Sprintf("value of %s contains a NUL byte", k))
		}
		size += len(k) + len(v) + 2
	}
	if size > maxEnvBytes {
		return errdefs.Invalid(field, "size", fmt.Sprintf("at most %d bytes in all", maxEnvBytes))
	}
	return nil
}

// envList turns env into KEY=VALUE entries in a stable order.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range sortedKeys(env) {
		out = append(out, k+"="+env[k])
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func findTemplate(tpls []image.Template, name string) (image.Template, bool) {
	for _, t := range tpls {
		if t.Name == name {
			return t, true
		}
	}
	return image.Template{}, false
}

// truncate bounds s for a column or a message (clip.String).
func truncate(s string, n int) string { return clip.String(s, n) }

// ExecRequest is one command to run in a sandbox.
type ExecRequest struct {
	Cmd []string
	// Cwd is the working directory: absolute, or relative to /workspace.
	Cwd string
	Env map[string]string
	// Stdin is sent to the command, then closed; empty means no input.
	Stdin []byte
	// TimeoutSeconds kills the command when it passes; 0 means the
	// service's default.
	TimeoutSeconds int
	// Started, if set, is called once the command runs, with its record's
	// id and its process id in the sandbox.
	Started func(execID string, pid int)
}

// Bounds of an ExecRequest.
const (
	maxArgvBytes = 128 << 10
	maxPathBytes = 4096
)

func (r *ExecRequest) check(cfg Config) error {
	if len(r.Cmd) == 0 || r.Cmd[0] == "" {
		return errdefs.Invalid("cmd", "required", "must name a program: a non-empty list whose first item is the program")
	}
	size := 0
	for i, a := range r.Cmd {
		if strings.ContainsRune(a, 0) {
			return errdefs.Invalid("cmd", "nul", fmt.Sprintf("item %d contains a NUL byte", i))
		}
		size += len(a) + 1
	}
	if size > maxArgvBytes {
		return errdefs.Invalid("cmd", "size", fmt.Sprintf("at most %d bytes in all", maxArgvBytes))
	}
	if len(r.Cwd) > maxPathBytes || strings.ContainsRune(r.Cwd, 0) {
		return errdefs.Invalid("cwd", "path", fmt.Sprintf("must be a path of at most %d bytes without NUL", maxPathBytes))
	}
	if err := checkEnv("env", r.Env); err != nil {
		return err
	}
	if r.TimeoutSeconds == 0 {
		r.TimeoutSeconds = cfg.DefaultExecTimeoutSeconds
	}
	if r.TimeoutSeconds < 1 || r.TimeoutSeconds > MaxTimeoutSeconds {
		return errdefs.Invalid("timeout_seconds", "range", fmt.Sprintf("must be between 1 and %d", MaxTimeoutSeconds))
	}
	if int64(len(r.Stdin)) > cfg.MaxStdinBytes {
		return errdefs.Invalid("stdin", "size", fmt.Sprintf("at most %d bytes", cfg.MaxStdinBytes))
	}
	return nil
}

// checkPath refuses file paths that are empty, too long, hold NUL, or climb
// with "..": the agent would confine them to the sandbox anyway, but a
// request that tries is refused outright rather than quietly resolved.
func checkPath(p string) error {
	if err := checkPathField("path", p); err != nil {
		return err
	}
	if strings.HasSuffix(p, "/") {
		return errdefs.Invalid("path", "syntax", "must name a file, not a folder")
	}
	return nil
}
