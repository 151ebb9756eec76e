package tenants

import "github.com/stockade-dev/stockade/tenants/errdefs"

// Compatibility shims: the error vocabulary lives in tenants/errdefs. These
// names are the same values and types, so errors.Is and errors.As agree
// across both spellings; new code spells errdefs.*, and a later sweep
// removes these.
var (
	ErrNotFound     = errdefs.ErrNotFound
	ErrConflict     = errdefs.ErrConflict
	ErrInvalid      = errdefs.ErrInvalid
	ErrQuota        = errdefs.ErrQuota
	ErrUnauthorized = errdefs.ErrUnauthorized
	ErrForbidden    = errdefs.ErrForbidden
)

// FieldError is errdefs.FieldError (shim).
type FieldError = errdefs.FieldError

// QuotaError is errdefs.QuotaError (shim).
type QuotaError = errdefs.QuotaError

// Invalid returns a *FieldError (shim of errdefs.Invalid).
func Invalid(field, rule, detail string) error { return errdefs.Invalid(field, rule, detail) }
