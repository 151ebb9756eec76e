package web_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestSlowBodyIsCut: a client that sends its headers and then trickles (or
// stops sending) its body no longer holds the connection for ever: the
// server stops reading at the body deadline, answers 408 and closes.
func TestSlowBodyIsCut(t *testing.T) {
	env := webtest.New(t, webtest.Options{BodyTimeout: 300 * time.Millisecond})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	token := env.Token(t, acme, tenants.RoleAdmin)
	u, _ := url.Parse(env.URL)

	for _, tc := range []struct {
		name string
		head string
	}{
		{"json api", "POST /api/v1/members HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n"},
		{"chunked", "POST /api/v1/members HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"file upload", "PUT /api/v1/sandboxes/01900000-0000-7000-8000-000000000000/files?path=/workspace/x HTTP/1.1\r\nHost: %s\r\n" +
			"Authorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nContent-Length: 4096\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := env.Counts(t)
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A guard, not a measure: the old server never answered at all.
			if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			first := `{"email":`
			if strings.Contains(tc.head, "chunked") {
				first = fmt.Sprintf("%x\r\n%s\r\n", len(first), first)
			}
			if _, err := fmt.Fprintf(conn, tc.head+first, u.Host, token); err != nil {
				t.Fatal(err)
			}
			// ... and nothing more: the rest of the body never comes.
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("Got(reading the answer to a stalled body) = %v; want the server to answer and cut it", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// The file upload's sandbox does not exist: authorization and
			// lookup may answer before the body is read, which also frees the
			// connection.
			if resp.StatusCode != http.StatusRequestTimeout && !(tc.name == "file upload" && resp.StatusCode == http.StatusNotFound) {
				t.Errorf("Got(status) = %d %.200s; want 408", resp.StatusCode, body)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("Got(connection after the answer) = %v; want closed (EOF)", err)
			}
			env.Unchanged(t, before)
		})
	}

	t.Run("a complete body is not cut, nor the connection after it", func(t *testing.T) {
		c := env.WithToken(token)
		for i := range 2 {
			if s, body := c.JSON(t, http.MethodPost, "/api/v1/members", map[string]string{"email": fmt.Sprintf("ok%d@acme.test", i), "role": "developer"}, nil); s != http.StatusCreated {
				t.Fatalf("Got(invite %d) = %d %s; want 201", i, s, body)
			}
			// Past the body deadline on the same keep-alive connection.
			time.Sleep(500 * time.Millisecond)
		}
	})
}
