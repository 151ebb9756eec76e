package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// Once its body is in, a request may take as long as it needs: the body
// deadline must not cancel a long response (a streamed exec) after it. The
// handler reads the whole body, then outlives the deadline several times
// over, and its request context must still be live. (bodyDeadline relies
// on net/http clearing the read deadline when the body hits EOF.)
func TestBodyDeadlineLiftedOnceBodyIsIn(t *testing.T) {
	s := &Server{cfg: Config{BodyTimeout: 100 * time.Millisecond, BodyMinRate: DefaultBodyMinRate}}
	e := echo.New()
	e.Use(s.bodyDeadline)
	e.POST("/stream", func(c echo.Context) error {
		if _, err := io.ReadAll(c.Request().Body); err != nil {
			return err
		}
		for range 4 {
			time.Sleep(100 * time.Millisecond) // past the body deadline
			if err := c.Request().Context().Err(); err != nil {
				return c.String(http.StatusInternalServerError, "context ended: "+err.Error())
			}
			if _, err := c.Response().Write([]byte("tick\n")); err != nil {
				return err
			}
			c.Response().Flush()
		}
		return nil
	})
	srv := httptest.NewServer(e)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/stream", "application/json", strings.NewReader(`{"cmd":["sleep","1"]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || strings.Count(string(body), "tick") != 4 {
		t.Errorf("Got(streamed response) = %d %q, %v; want 200 and four ticks", resp.StatusCode, body, err)
	}
}
