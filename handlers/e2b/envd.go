package e2b

import (
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// The envd surface (E2B.md B.3). No API key reaches it: a request is
// authenticated by X-Access-Token alone (an access token create or connect
// handed out), which must be bound to the sandbox E2b-Sandbox-Id names,
// and that sandbox must still run. Authorization: Basic names the user
// (never a credential): root is refused.

// binding is the sandbox an envd request acts on.
type binding struct {
	tenantID, sandboxID string
	actor               audit.Actor
}

type bindingKey struct{}

func bindingOf(ctx context.Context) binding {
	b, _ := ctx.Value(bindingKey{}).(binding)
	return b
}

// authenticate checks an envd request's token, sandbox and port.
func (s *Server) authenticate(r *http.Request) (binding, int, string) {
	if p := r.Header.Get("E2b-Sandbox-Port"); p != "" && p != EnvdPort {
		return binding{}, http.StatusBadGateway, "port " + p + " of a sandbox is not served here (only envd's " + EnvdPort + ")"
	}
	tok, err := s.lookupToken(r.Context(), r.Header.Get("X-Access-Token"))
	if err != nil || tok.SandboxID != r.Header.Get("E2b-Sandbox-Id") {
		if err != nil && !errors.Is(err, errdefs.ErrUnauthorized) {
			s.log.Warn("e2b: envd auth", "err", err)
		}
		return binding{}, http.StatusUnauthorized, "missing or invalid X-Access-Token for this sandbox (E2b-Sandbox-Id)"
	}
	sb, err := s.sbx.Store().Sandbox(r.Context(), tok.TenantID, tok.SandboxID)
	if err != nil || !sb.State.Active() {
		return binding{}, http.StatusBadGateway, "the sandbox is not running"
	}
	ra := r.RemoteAddr
	if h, _, ok := strings.Cut(ra, ":"); ok {
		ra = h
	}
	return binding{tenantID: tok.TenantID, sandboxID: tok.SandboxID,
		actor: audit.Actor{Kind: tok.ActorKind, ID: tok.ActorID, Name: tok.ActorName + " via E2B", RemoteAddr: ra}}, 0, ""
}

// EnvdSandbox is the tenant and sandbox r's access token is bound to, when
// it is valid for the sandbox r names and that sandbox runs (web forwards
// the request to the replica owning the sandbox's channel).
func (s *Server) EnvdSandbox(r *http.Request) (tenantID, sandboxID string, ok bool) {
	b, status, _ := s.authenticate(r)
	return b.tenantID, b.sandboxID, status == 0
}

// envdAuth puts the request's binding on its context or answers the
// failure (Connect's JSON error on RPC paths, E2B's {code,message} on
// /files).
func (s *Server) envdAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, status, msg := s.authenticate(r)
		if status != 0 {
			if strings.HasPrefix(r.URL.Path, "/files") {
				writeError(w, status, msg)
				return
			}
			code := connect.CodeUnauthenticated
			if status == http.StatusBadGateway {
				code = connect.CodeUnavailable
			}
			_ = connect.NewErrorWriter().Write(w, r, connect.NewError(code, errors.New(msg)))
			return
		}
		if u := basicUser(r); u == "root" {
			if strings.HasPrefix(r.URL.Path, "/files") {
				writeError(w, http.StatusForbidden, "user root is not allowed: sandboxes run as the unprivileged user")
				return
			}
			_ = connect.NewErrorWriter().Write(w, r, connect.NewError(connect.CodePermissionDenied, errors.New("user root is not allowed: sandboxes run as the unprivileged user")))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bindingKey{}, b)))
	})
}

// basicUser is the user Authorization: Basic base64("user:") names, or
// the username query parameter of /files.
func basicUser(r *http.Request) string {
	if u := r.URL.Query().Get("username"); u != "" {
		return u
	}
	scheme, v, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return ""
	}
	u, _, _ := strings.Cut(string(raw), ":")
	return u
}

// health: 204 while the sandbox of the request's token runs, 502 otherwise.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if _, status, _ := s.authenticate(r); status != 0 {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) files(w http.ResponseWriter, r *http.Request) {
	b := bindingOf(r.Context())
	var err error
	switch r.Method {
	case http.MethodGet:
		err = s.readFile(w, r, b)
	case http.MethodPost:
		err = s.writeFiles(w, r, b)
	default:
		writeError(w, http.StatusMethodNotAllowed, "GET or POST")
		return
	}
	if err == nil {
		return
	}
	p := errdefs.ToProblem(err)
	msg := err.Error()
	if p.Status == http.StatusNotFound {
		msg = "file not found: " + r.URL.Query().Get("path")
	}
	if p.Status == http.StatusUnprocessableEntity {
		p.Status = http.StatusBadRequest
	}
	if w.Header().Get("Content-Length") == "" || p.Status >= 400 {
		writeError(w, p.Status, msg)
	}
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, b binding) error {
	p := inPath(r.URL.Query().Get("path"))
	started := false
	_, err := s.sbx.ReadFile(r.Context(), b.actor, b.tenantID, b.sandboxID, p, func(size int64) (io.Writer, error) {
		started = true
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.WriteHeader(http.StatusOK)
		return w, nil
	})
	if started {
		return nil // cut short: the client sees a short body
	}
	return err
}

type writtenEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (s *Server) writeFiles(w http.ResponseWriter, r *http.Request, b binding) error {
	if err := s.sbx.CheckFiles(r.Context(), b.tenantID, b.sandboxID); err != nil {
		return err
	}
	qpath := r.URL.Query().Get("path")
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return &errdefs.MalformedError{Detail: "gzip body: " + err.Error()}
		}
		defer zr.Close()
		body = zr
	}
	var out []writtenEntry
	put := func(p string, body io.Reader) error {
		if p == "" {
			return errdefs.Invalid("path", "required", "a file path is required")
		}
		fi, err := s.sbx.WriteFile(r.Context(), b.actor, b.tenantID, b.sandboxID, inPath(p), body, 0)
		if err != nil {
			return err
		}
		out = append(out, writtenEntry{Name: path.Base(fi.Path), Type: "file", Path: outPath(fi.Path)})
		return nil
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return &errdefs.MalformedError{Detail: "multipart body: " + err.Error()}
			}
			name := part.FileName()
			if name == "" || (qpath != "" && !strings.HasPrefix(name, "/")) {
				name = qpath
			}
			if err := put(name, part); err != nil {
				return err
			}
		}
	} else if err := put(qpath, body); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// rpcErr maps a service error to its Connect code.
func rpcErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	case errdefs.IsNotFound(err):
		code = connect.CodeNotFound
	case errdefs.IsInvalid(err), errdefs.IsMalformed(err):
		code = connect.CodeInvalidArgument
	case errdefs.IsNoSpace(err), errdefs.IsQuota(err), errdefs.IsTooLarge(err):
		code = connect.CodeResourceExhausted
	case errdefs.IsForbidden(err):
		code = connect.CodePermissionDenied
	case errdefs.IsConflict(err):
		code = connect.CodeFailedPrecondition
	case errdefs.IsUnavailable(err):
		code = connect.CodeUnavailable
	}
	return connect.NewError(code, err)
}

var _ = sandbox.EntryFile
