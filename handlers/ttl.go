package handlers

import (
	"time"

	"github.com/stockade-dev/stockade/tenants"
)

// ParseTTL is tenants.ParseTTL, kept for code written before it moved.
//
// Deprecated: use tenants.ParseTTL.
func ParseTTL(s string) (time.Duration, error) { return tenants.ParseTTL(s) }
