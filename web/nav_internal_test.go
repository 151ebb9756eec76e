package web

import "testing"

func TestNavMatches(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"/", "/", true},
		{"/sandboxes", "/sandboxes", true},
		{"/sandboxes", "/sandboxes/x", false},
		{"/sandboxes/:id", "/sandboxes/abc", true},
		{"/sandboxes/:id", "/sandboxes/", false},
		{"/policy/versions/:version", "/policy/versions/3", true},
		{"/runs/:run/artifacts/:index", "/runs/r1/artifacts/0", true},
		{"/runs/:run/artifacts/:index", "/runs/r1/logs/0", false},
		{"/vms", "/vmsx", false},
	}
	for _, tt := range tests {
		if got := matches(tt.pattern, tt.path); got != tt.want {
			t.Errorf("Got(matches(%q, %q)) = %v; want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}
