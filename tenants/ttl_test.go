package tenants_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestParseTTL: durations and whole days are read; anything else is a
// field error on ttl.
func TestParseTTL(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"", 0, false},
		{"  ", 0, false},
		{"36h", 36 * time.Hour, false},
		{" 30d ", 30 * 24 * time.Hour, false},
		{"90m", 90 * time.Minute, false},
		{"0d", 0, true},
		{"-1d", 0, true},
		{"1.5d", 0, true},
		{"d", 0, true},
		{"soon", 0, true},
		{"30", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := tenants.ParseTTL(tt.in)
			if tt.bad {
				var fe *errdefs.FieldError
				if !errors.As(err, &fe) || fe.Field != "ttl" || !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("Got(ParseTTL(%q)) = %v, %v; want a field error on ttl", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Got(ParseTTL(%q)) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}
