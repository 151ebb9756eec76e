package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// /metrics carries every tenant's usage: with a token only its bearer gets
// in; without one, only this machine, and only when the server is published
// on loopback (a TLS proxy on this machine in front of a public URL makes
// every request loopback).
func TestMetricsGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("metrics")) })
	for _, tt := range []struct {
		name, publicURL, token, remote, auth string
		want                                 int
	}{
		{"no token, loopback v4", "http://127.0.0.1:8080", "", "127.0.0.1:4000", "", http.StatusOK},
		{"no token, loopback v6", "http://[::1]:8080", "", "[::1]:4000", "", http.StatusOK},
		{"no token, localhost URL", "http://localhost:8080", "", "127.0.0.1:4000", "", http.StatusOK},
		{"no token, remote", "http://127.0.0.1:8080", "", "203.0.113.7:4000", "", http.StatusForbidden},
		{"no token, forwarded header ignored", "http://127.0.0.1:8080", "", "203.0.113.7:4000", "", http.StatusForbidden},
		// The attack: a TLS proxy on this machine forwards the world's
		// requests, so every one arrives from loopback.
		{"no token, public URL, request via a local proxy", "https://stockade.example.com", "", "127.0.0.1:4000", "", http.StatusForbidden},
		{"no token, public IP URL, request via a local proxy", "http://203.0.113.9:8080", "", "[::1]:4000", "", http.StatusForbidden},
		{"no token, no public URL", "", "", "127.0.0.1:4000", "", http.StatusForbidden},
		{"token, right bearer from anywhere", "https://stockade.example.com", "s3cret-token-0123456", "203.0.113.7:4000", "Bearer s3cret-token-0123456", http.StatusOK},
		{"token, wrong bearer", "http://127.0.0.1:8080", "s3cret-token-0123456", "127.0.0.1:4000", "Bearer nope", http.StatusUnauthorized},
		{"token, none sent from loopback", "http://127.0.0.1:8080", "s3cret-token-0123456", "127.0.0.1:4000", "", http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.RemoteAddr = tt.remote
			r.Header.Set("X-Forwarded-For", "127.0.0.1")
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			w := httptest.NewRecorder()
			metricsGuard(tt.token, LoopbackURL(tt.publicURL), ok).ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Errorf("Got(GET /metrics) = %d; want %d", w.Code, tt.want)
			}
		})
	}
}
