package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Tool is one entry of the tool table: its name, the permission it needs
// (its REST twin's) and how it registers with the SDK server.
type Tool struct {
	Name string
	Perm tenants.Permission
	add  func(*sdk.Server)
}

// table is the tool table. Adding a tool is one line here and one method
// below: its input type (the schema is generated from it, descriptions
// from jsonschema tags; a field without omitempty is required), its output
// type and what it calls on the sandbox service.
func (s *Server) table() []Tool {
	w, r := tenants.PermSandboxesWrite, tenants.PermSandboxesRead
	return []Tool{
		tool(s, "list_sandboxes", "List the tenant's sandboxes: active ones, then recently ended.", r, readOnly, s.listSandboxes),
		tool(s, "create_sandbox", "Create a sandbox and wait until it runs (seconds to a minute). Every field is optional; "+
			"the tenant policy gives the defaults and bounds. Answers the sandbox; its id is what the other tools take.", w, nil, s.createSandbox),
		tool(s, "destroy_sandbox", "Destroy a sandbox and everything in it.", w, destructive, s.destroySandbox),
		tool(s, "exec", "Run a command in a running sandbox and wait for it to end; answers its exit code and output "+
			"(each stream up to 1 MiB). cmd is the argv, no shell: use [\"sh\",\"-c\",\"...\"] for a shell line.", w, nil, s.exec),
		tool(s, "read_file", "Read a file of a running sandbox (up to 1 MiB). Text comes back as is; other bytes as base64 "+
			"(encoding says which).", w, readOnly, s.readFile),
		tool(s, "write_file", "Write a file of a running sandbox, whole or not at all; missing folders are made.", w, nil, s.writeFile),
		tool(s, "list_files", "List a folder of a running sandbox, depth levels deep (links listed, not followed).", w, readOnly, s.listFiles),
		tool(s, "make_dir", "Make a folder of a running sandbox with its missing parents (mkdir -p).", w, nil, s.makeDir),
		tool(s, "remove_file", "Remove a file, link or folder of a running sandbox (a folder with what it holds only with recursive).", w, destructive, s.removeFile),
		tool(s, "move_file", "Move or rename a file or folder of a running sandbox; a file at the destination is replaced.", w, nil, s.moveFile),
		tool(s, "start_process", "Start a command in a running sandbox, detached: it runs until it exits, is signalled or the sandbox ends, "+
			"whoever is connected. Answers its pid; read its output with read_process_output.", w, nil, s.startProcess),
		tool(s, "list_processes", "List a sandbox's processes: running ones, then the latest ended.", r, readOnly, s.listProcesses),
		tool(s, "read_process_output", "Read a process's output (stdout and stderr together) from an offset, up to 1 MiB, "+
			"optionally waiting for it to end first; answers its state and the offset to go on from.", w, readOnly, s.readProcessOutput),
		tool(s, "signal_process", "Send a signal (SIGTERM, SIGKILL, SIGINT ...) to a process's process group.", w, nil, s.signalProcess),
		tool(s, "get_port_url", "The URL of a port of a sandbox (a dev server the sandbox listens on), reached through the control plane "+
			"with the tenant's API token.", w, readOnly, s.getPortURL),
		tool(s, "set_timeout", "Set a running sandbox's remaining lifetime from now, longer or shorter, within the tenant policy's maximum.", w, nil, s.setTimeout),
	}
}

var (
	no          = false
	readOnly    = &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	destructive = &sdk.ToolAnnotations{DestructiveHint: new(true), IdempotentHint: true, OpenWorldHint: &no}
)

// tool makes a table entry of run: the SDK validates the arguments
// against In's schema before run is called; run's errors become tool
// errors (isError) in the REST API's words (toolErr).
func tool[In, Out any](s *Server, name, desc string, perm tenants.Permission, ann *sdk.ToolAnnotations,
	run func(ctx context.Context, c *caller, in In) (Out, error)) Tool {
	return Tool{Name: name, Perm: perm, add: func(srv *sdk.Server) {
		sdk.AddTool(srv, &sdk.Tool{Name: name, Description: desc, Annotations: ann, InputSchema: inputSchema[In]()},
			func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error) {
				var zero Out
				c, ok := callerOf(req)
				if !ok { // guard refused it already; never reached
					return nil, zero, errdefs.ErrUnauthorized
				}
				out, err := run(ctx, c, in)
				if err != nil {
					if errdefs.IsNotFound(err) {
						err = s.notFound(ctx, c, in, err)
					}
					return nil, zero, s.toolErr(ctx, name, err)
				}
				return nil, out, nil
			})
	}}
}

// inputSchema is In's JSON Schema as the SDK would infer it, with the
// descriptions of the wire types' fields (their doc tags, which the
// OpenAPI document uses) where a field has no jsonschema tag, and no
// property that may be null.
func inputSchema[In any]() *jsonschema.Schema {
	sch, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp tool input %T: %v", *new(In), err)) // a programming error, caught by every test
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[In]()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		p := sch.Properties[name]
		if p == nil {
			continue
		}
		if p.Description == "" {
			p.Description = f.Tag.Get("doc")
		}
		// A slice or map may be null in Go's eyes; to a client an argument
		// is an array or an object, or left out.
		if len(p.Types) == 2 && p.Types[0] == "null" {
			p.Type, p.Types = p.Types[1], nil
		}
	}
	return sch
}

// Sandbox is a sandbox as the tools answer it: what an agent needs of
// api.Sandbox.
type Sandbox struct {
	ID             string            `json:"id"`
	State          string            `json:"state" jsonschema:"creating, running, stopped, destroyed or failed"`
	StateReason    string            `json:"state_reason,omitempty"`
	Template       string            `json:"template"`
	VCPUs          int               `json:"vcpus"`
	MemoryMiB      int               `json:"memory_mib"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	CreatedAt      string            `json:"created_at"`
	ExpiresAt      string            `json:"expires_at" jsonschema:"when it is destroyed unless it ends before"`
	EndedAt        string            `json:"ended_at,omitempty"`
}

func sandboxOut(sb sandbox.Sandbox) Sandbox {
	out := Sandbox{ID: sb.ID, State: string(sb.State), StateReason: sb.StateReason, Template: sb.Template, VCPUs: sb.VCPUs,
		MemoryMiB: sb.MemoryMiB, TimeoutSeconds: sb.TimeoutSeconds, Metadata: sb.Metadata(),
		CreatedAt: sb.CreatedAt.UTC().Format(time.RFC3339), ExpiresAt: sb.ExpiresAt.UTC().Format(time.RFC3339)}
	if sb.EndedAt != nil {
		out.EndedAt = sb.EndedAt.UTC().Format(time.RFC3339)
	}
	return out
}

// SandboxRef names a sandbox of the caller's tenant.
type SandboxRef struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (create_sandbox or list_sandboxes answer it)"`
}

func (r SandboxRef) ref() SandboxRef { return r }

// notFound says what was not found, in the field's name: the REST API's
// 404 needs no words, an agent does. The service decided; this only asks
// whether the sandbox is there to name the field.
func (s *Server) notFound(ctx context.Context, c *caller, in any, err error) error {
	ref, ok := in.(interface{ ref() SandboxRef })
	if !ok {
		return err
	}
	id := ref.ref().SandboxID
	if _, gerr := s.sbx.Get(ctx, c.tenantID, id); errdefs.IsNotFound(gerr) {
		return errdefs.WithDetail(err, fmt.Sprintf("sandbox_id: no sandbox %q in this tenant", truncate(id, maxAuditedName)))
	}
	if p, ok := in.(interface{ path() string }); ok {
		return errdefs.WithDetail(err, fmt.Sprintf("path: no such file or directory %q in the sandbox", truncate(p.path(), 4096)))
	}
	return err
}

func (r SandboxRef) check() error {
	if strings.TrimSpace(r.SandboxID) == "" {
		return errdefs.Invalid("sandbox_id", "required", "is required: the id create_sandbox or list_sandboxes answered")
	}
	return nil
}

// ListSandboxesIn takes nothing.
type ListSandboxesIn struct{}

// SandboxesOut is the tenant's sandboxes.
type SandboxesOut struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

func (s *Server) listSandboxes(ctx context.Context, c *caller, _ ListSandboxesIn) (SandboxesOut, error) {
	sbs, err := s.sbx.List(ctx, c.tenantID)
	if err != nil {
		return SandboxesOut{}, err
	}
	out := SandboxesOut{Sandboxes: make([]Sandbox, 0, len(sbs))}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, sandboxOut(sb))
	}
	return out, nil
}

// createSandbox takes POST /api/v1/sandboxes's body.
func (s *Server) createSandbox(ctx context.Context, c *caller, in api.CreateSandbox) (Sandbox, error) {
	sb, err := s.sbx.Create(ctx, c.actor, c.tenantID, sandbox.Spec{
		Template: in.Template, VCPUs: in.VCPUs, MemoryMiB: in.MemoryMiB, TimeoutSeconds: in.TimeoutSeconds,
		IdleTimeoutSeconds: in.IdleTimeoutSeconds, Env: in.Env, Metadata: in.Metadata,
	})
	if err != nil {
		return Sandbox{}, err
	}
	return sandboxOut(sb), nil
}

func (s *Server) destroySandbox(ctx context.Context, c *caller, in SandboxRef) (Sandbox, error) {
	if err := in.check(); err != nil {
		return Sandbox{}, err
	}
	sb, err := s.sbx.Destroy(ctx, c.actor, c.tenantID, in.SandboxID)
	if err != nil {
		return Sandbox{}, err
	}
	return sandboxOut(sb), nil
}

// ExecIn is exec's input: the sandbox and POST
// /api/v1/sandboxes/{id}/exec's body.
type ExecIn struct {
	SandboxRef
	api.ExecRequest
}

// maxOutput bounds each output stream exec answers, and read_file.
const maxOutput = 1 << 20

func (s *Server) exec(ctx context.Context, c *caller, in ExecIn) (api.ExecResult, error) {
	if err := in.check(); err != nil {
		return api.ExecResult{}, err
	}
	if len(in.Cmd) == 0 {
		return api.ExecResult{}, errdefs.Invalid("cmd", "required", `is required: the program and its arguments, e.g. ["echo","hi"]`)
	}
	stdout, stderr := &capped{max: maxOutput}, &capped{max: maxOutput}
	res, err := s.sbx.Exec(ctx, c.actor, c.tenantID, in.SandboxID, sandbox.ExecRequest{
		Cmd: in.Cmd, Cwd: in.Cwd, Env: in.Env, Stdin: []byte(in.Stdin), TimeoutSeconds: in.TimeoutSeconds,
	}, stdout, stderr)
	if err != nil {
		return api.ExecResult{}, err
	}
	return api.ExecResult{ExecID: res.ExecID, ExitCode: res.ExitCode, Signal: res.Signal, Reason: res.Reason,
		DurationMS: res.Duration.Milliseconds(), Stdout: stdout.text(), Stderr: stderr.text(),
		StdoutTruncated: stdout.cut, StderrTruncated: stderr.cut}, nil
}

// capped keeps the first max bytes written and notes that more came.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
	cut bool
}

func (b *capped) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); len(p) > room {
		b.cut = true
		b.buf.Write(p[:max(room, 0)])
	} else {
		b.buf.Write(p)
	}
	return len(p), nil
}

func (b *capped) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.ToValidUTF8(b.buf.String(), "\uFFFD")
}

// ReadFileIn is read_file's input.
type ReadFileIn struct {
	SandboxRef
	Path string `json:"path" jsonschema:"absolute in the sandbox, or relative to /workspace"`
}

func (in ReadFileIn) path() string { return in.Path }

// FileContent is a file read.
type FileContent struct {
	Path     string `json:"path"`
	Size     int64  `json:"size" jsonschema:"bytes"`
	Encoding string `json:"encoding" jsonschema:"utf-8 (content is the text) or base64"`
	Content  string `json:"content"`
}

func (s *Server) readFile(ctx context.Context, c *caller, in ReadFileIn) (FileContent, error) {
	if err := in.check(); err != nil {
		return FileContent{}, err
	}
	var buf bytes.Buffer
	fi, err := s.sbx.ReadFile(ctx, c.actor, c.tenantID, in.SandboxID, in.Path, func(size int64) (io.Writer, error) {
		if size > maxOutput {
			return nil, &errdefs.TooLargeError{Op: "read " + in.Path, Size: size, Max: maxOutput, Setting: "read_file",
				Bound: "1 MiB, what read_file answers (GET /api/v1/sandboxes/{id}/files reads up to the file limit)"}
		}
		return &buf, nil
	})
	if err != nil {
		return FileContent{}, err
	}
	out := FileContent{Path: fi.Path, Size: fi.Size, Encoding: "utf-8", Content: buf.String()}
	if !utf8.Valid(buf.Bytes()) {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(buf.Bytes())
	}
	return out, nil
}

// WriteFileIn is write_file's input.
type WriteFileIn struct {
	SandboxRef
	Path     string `json:"path" jsonschema:"absolute in the sandbox, or relative to /workspace"`
	Content  string `json:"content" jsonschema:"the file's bytes: text, or base64 with encoding base64"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64"`
	Mode     string `json:"mode,omitempty" jsonschema:"octal permission bits such as 0644 (the default) or 0755"`
}

func (s *Server) writeFile(ctx context.Context, c *caller, in WriteFileIn) (api.File, error) {
	if err := in.check(); err != nil {
		return api.File{}, err
	}
	body := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8":
	case "base64":
		var err error
		if body, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return api.File{}, errdefs.Invalid("content", "base64", "is not valid base64 (standard alphabet, padded)")
		}
	default:
		return api.File{}, errdefs.Invalid("encoding", "enum", `must be "utf-8" or "base64"`)
	}
	mode, err := octal("mode", in.Mode)
	if err != nil {
		return api.File{}, err
	}
	fi, err := s.sbx.WriteFile(ctx, c.actor, c.tenantID, in.SandboxID, in.Path, bytes.NewReader(body), mode)
	if err != nil {
		return api.File{}, err
	}
	return api.File{Path: fi.Path, Size: fi.Size, Mode: fmt.Sprintf("%04o", fi.Mode&0o7777)}, nil
}

// octal reads optional octal permission bits ("" is 0: the default).
func octal(field, s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, errdefs.Invalid(field, "syntax", "must be octal permission bits, such as 0644 or 755")
	}
	return uint32(m), nil
}
