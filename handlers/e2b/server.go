// Package e2b serves the E2B-compatible surface (../shared/E2B.md B.4):
// the control plane the e2b SDK reaches at E2B_API_URL
// ($STOCKADE_PUBLIC_URL/e2b) and the envd surface it reaches at
// E2B_SANDBOX_URL ($STOCKADE_PUBLIC_URL: /health, /files,
// /process.Process/*, /filesystem.Filesystem/*). Both map onto
// sandbox.Service, so everything is tenant-scoped, audited and metered as
// through the native API.
//
// Paths: E2B code expects user "user" with home /home/user; Stockade runs
// everything as uid 1000 with /workspace as the working directory. A path
// /home/user or under it means the same path under /workspace, and paths
// come back under /home/user (relative paths resolve from /workspace, as
// natively). User "root" is refused (permission_denied); any other user
// name runs as the sandbox user.
package e2b

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/handlers/e2b/proto/filesystem/filesystemconnect"
	"github.com/stockade-dev/stockade/handlers/e2b/proto/process/processconnect"
	"github.com/stockade-dev/stockade/sandbox"
)

// EnvdVersion is the envd version the sandboxes advertise: the SDK gates
// features on it (E2B.md B.3); 0.5.7 turns on stdin, closeStdin, the
// default user and octet-stream uploads.
const EnvdVersion = "0.5.7"

// EnvdPort is the only sandbox port the envd surface serves.
const EnvdPort = "49983"

// Deps are what the E2B surface needs.
type Deps struct {
	Sandboxes *sandbox.Service
	DB        *gorm.DB
	Log       *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Server serves the E2B control plane and envd surface.
type Server struct {
	sbx   *sandbox.Service
	db    *gorm.DB
	log   *slog.Logger
	now   func() time.Time
	api   *http.ServeMux
	envd  *http.ServeMux
	paths []string

	watchers pollWatchers // the Python sync SDK's polling watchers (watchers.go)
	cpu      cpuSamples   // each sandbox's previous CPU sample (metrics.go)
}

// New returns the server and registers its token cleanup on the
// sandbox service.
func New(d Deps) *Server {
	s := &Server{sbx: d.Sandboxes, db: d.DB, log: d.Log, now: d.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.api = s.apiMux()
	s.envd = http.NewServeMux()
	s.envd.HandleFunc("GET /health", s.health)
	s.envd.Handle("/files", s.envdAuth(http.HandlerFunc(s.files)))
	pp, ph := processconnect.NewProcessHandler(&processService{s: s})
	fp, fh := filesystemconnect.NewFilesystemHandler(&filesystemService{s: s})
	s.envd.Handle(pp, s.envdAuth(ph))
	s.envd.Handle(fp, s.envdAuth(fh))
	s.paths = []string{"/health", "/files", pp, fp}
	if s.sbx != nil {
		s.sbx.OnEnd(s.SandboxEnded)
	}
	return s
}

// EnvdPaths are the root paths of the envd surface ("/health", "/files",
// and the two RPC services' prefixes, ending in "/").
func (s *Server) EnvdPaths() []string { return s.paths }

// ServeEnvd serves one envd request (its own X-Access-Token auth).
func (s *Server) ServeEnvd(w http.ResponseWriter, r *http.Request) { s.envd.ServeHTTP(w, r) }

// home is where /home/user lives in a Stockade sandbox.
const (
	e2bHome = "/home/user"
	ourHome = "/workspace"
)

// inPath maps an E2B path to the sandbox's.
func inPath(p string) string {
	if p == e2bHome || strings.HasPrefix(p, e2bHome+"/") {
		return ourHome + p[len(e2bHome):]
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		return ourHome + p[1:]
	}
	return p
}

// outPath maps a sandbox path back to E2B's.
func outPath(p string) string {
	if p == ourHome || strings.HasPrefix(p, ourHome+"/") {
		return e2bHome + p[len(ourHome):]
	}
	return p
}

func contextWith(ctx context.Context, k, v any) context.Context { return context.WithValue(ctx, k, v) }

func hexDecode(s string) ([]byte, error) { return hex.DecodeString(s) }
