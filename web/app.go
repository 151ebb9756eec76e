package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"net/http"

	"github.com/labstack/echo/v4"
)

// The server is assembled by the composition root (cmd/stockade/app): it
// builds the stores, services and handlers and passes them to New. This
// package serves; it builds no domain service.

// DevIdPPath is where the development identity provider is mounted.
const DevIdPPath = "/dev-idp"

// Derive makes a purpose-specific key from the root key.
func Derive(root []byte, purpose string) []byte {
	m := hmac.New(sha256.New, root)
	m.Write([]byte("stockade/" + purpose))
	return m.Sum(nil)
}

// GitHubHookPath receives a tenant's GitHub deliveries. It is public and
// outside the route table's session, token and CSRF middleware: a delivery
// authenticates by its signature (X-Hub-Signature-256, checked by the
// handler before anything else), not by a session or token.
const GitHubHookPath = "/hooks/github/:tenant"

// GitHubReceiver serves one GitHub delivery for the tenant of the path
// (handlers/github.Receiver).
type GitHubReceiver interface {
	Serve(w http.ResponseWriter, r *http.Request, tenant string)
}

func (s *Server) mountGitHub(g GitHubReceiver) {
	s.echo.POST(GitHubHookPath, func(c echo.Context) error {
		g.Serve(c.Response(), c.Request(), c.Param("tenant"))
		return nil
	})
}
