package tenants

import (
	"errors"
	"fmt"
)

// Domain errors. Handlers return these (wrapped); web/ maps them to HTTP in
// one place with errors.Is / errors.As.
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")
	ErrInvalid      = errors.New("invalid")
	ErrQuota        = errors.New("quota exceeded")
	ErrUnauthorized = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
)

// FieldError is a validation failure of one named field. It wraps ErrInvalid.
type FieldError struct {
	Field  string // JSON / form field name, e.g. "slug"
	Rule   string // short rule id, e.g. "slug_format"
	Detail string // human sentence, e.g. "must be 3-40 lowercase letters, digits or '-'"
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s", e.Field, e.Detail)
}

func (e *FieldError) Unwrap() error { return ErrInvalid }

// Invalid returns a *FieldError.
func Invalid(field, rule, detail string) error {
	return &FieldError{Field: field, Rule: rule, Detail: detail}
}
