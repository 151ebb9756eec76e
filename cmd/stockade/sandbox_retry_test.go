package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stockade-dev/stockade/handlers/api"
)

// TestSandboxCreateRetries: `stockade sandbox create` sends an
// Idempotency-Key and, when an attempt times out or the server is
// unavailable, retries with the same key and the same body; a refusal is
// not retried. (The server side of the key is tested on real VMs in
// sandbox/.)
func TestSandboxCreateRetries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answers  []int // per attempt: 0 hangs past the attempt timeout
		wantErr  string
		attempts int
	}{
		{"timeout, then answered", []int{0, http.StatusCreated}, "", 2},
		{"unavailable twice", []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusCreated}, "", 3},
		{"in progress", []int{http.StatusConflict, http.StatusCreated}, "", 2},
		{"refused", []int{http.StatusUnprocessableEntity, http.StatusCreated}, "422", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu     sync.Mutex
				keys   []string
				bodies []string
			)
			release := make(chan struct{})
			defer close(release)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				n := len(keys)
				keys = append(keys, r.Header.Get(api.IdempotencyHeader))
				bodies = append(bodies, string(b))
				mu.Unlock()
				status := tc.answers[n]
				switch status {
				case 0:
					select {
					case <-release:
					case <-r.Context().Done():
					}
					return
				case http.StatusCreated:
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(status)
					io.WriteString(w, `{"id":"sb-1","state":"running"}`)
				default:
					w.Header().Set("Content-Type", "application/problem+json")
					w.WriteHeader(status)
					io.WriteString(w, `{"status":`+itoa(status)+`,"title":"x","detail":"a request with this Idempotency-Key is still in progress"}`)
				}
			}))
			defer srv.Close()
			getenv := env(map[string]string{"STOCKADE_URL": srv.URL, "STOCKADE_TOKEN": "stk_test"})
			out, errOut, err := cli(t, getenv, "sandbox", "create", "--memory", "64", "--attempt-timeout", "300ms")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Got(create) err = %v; want %s", err, tc.wantErr)
				}
			} else if err != nil || strings.TrimSpace(out) != "sb-1" {
				t.Errorf("Got(create) = %q, %v (stderr %s); want sb-1", out, err, errOut)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(keys) != tc.attempts {
				t.Fatalf("Got(attempts) = %d; want %d", len(keys), tc.attempts)
			}
			for i := range keys {
				if keys[i] == "" || keys[i] != keys[0] || bodies[i] != bodies[0] {
					t.Errorf("Got(attempt %d) key %q body %s; want the first's key %q and body", i+1, keys[i], bodies[i], keys[0])
				}
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
