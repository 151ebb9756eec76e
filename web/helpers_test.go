package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/web/webtest"
)

// meJSON is GET /api/v1/me.
type meJSON struct {
	Kind     string  `json:"kind"`
	Operator bool    `json:"operator"`
	Tenant   *string `json:"tenant"`
	Role     *string `json:"role"`
	User     *struct {
		ID    string `json:"id"`
		Email string `json:"email"`
	} `json:"user"`
	Token *struct {
		ID     string `json:"id"`
		Name   string `json:"name"`
		Prefix string `json:"prefix"`
	} `json:"token"`
}

// me asks who c is; status is 200 or the failure.
func me(t testing.TB, c *webtest.Client) (int, meJSON) {
	t.Helper()
	var m meJSON
	status, body, _ := c.Request(t, http.MethodGet, "/api/v1/me", "", nil)
	if status == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("decode /api/v1/me: %v: %s", err, body)
		}
	}
	return status, m
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// finish reads and closes the last response of a flow.
func finish(t testing.TB, resp *http.Response) (int, string, *url.URL) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, string(b), resp.Request.URL
}

// visit GETs an absolute URL with c's cookies, without following redirects.
func visit(t testing.TB, c *webtest.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// loginRedirect reports whether a response is the redirect to the sign-in
// page that authorization answers anonymous page requests with.
func loginRedirect(status int, hdr http.Header) bool {
	return status == http.StatusSeeOther && strings.HasPrefix(hdr.Get("Location"), "/login?return_to=")
}

func sleep() { time.Sleep(50 * time.Millisecond) }
