package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// /metrics carries every tenant's usage: with a token only its bearer gets
// in; without one, only this machine.
func TestMetricsGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("metrics")) })
	for _, tt := range []struct {
		name, token, remote, auth string
		want                      int
	}{
		{"no token, loopback v4", "", "127.0.0.1:4000", "", http.StatusOK},
		{"no token, loopback v6", "", "[::1]:4000", "", http.StatusOK},
		{"no token, remote", "", "203.0.113.7:4000", "", http.StatusForbidden},
		{"no token, forwarded header ignored", "", "203.0.113.7:4000", "", http.StatusForbidden},
		{"token, right bearer from anywhere", "s3cret-token-0123456", "203.0.113.7:4000", "Bearer s3cret-token-0123456", http.StatusOK},
		{"token, wrong bearer", "s3cret-token-0123456", "127.0.0.1:4000", "Bearer nope", http.StatusUnauthorized},
		{"token, none sent from loopback", "s3cret-token-0123456", "127.0.0.1:4000", "", http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.RemoteAddr = tt.remote
			r.Header.Set("X-Forwarded-For", "127.0.0.1")
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			w := httptest.NewRecorder()
			metricsGuard(tt.token, ok).ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Errorf("Got(GET /metrics) = %d; want %d", w.Code, tt.want)
			}
		})
	}
}
