package errdefs

import "fmt"

// FieldError is a validation failure of one named field. It wraps
// ErrInvalid. A document checked against a schema fails on many fields at
// once: an error whose Unwrap() []error holds several *FieldError lists
// them all in its problem.
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

// Required is the *FieldError of a required field left empty: rule and
// detail "required", what a form shows next to the field.
func Required(field string) error {
	return &FieldError{Field: field, Rule: "required", Detail: "required"}
}

// MalformedError names the field (or position) where decoding a request
// failed. It wraps ErrMalformed.
type MalformedError struct {
	Field  string
	Detail string
}

func (e *MalformedError) Error() string {
	if e.Field == "" {
		return "malformed request: " + e.Detail
	}
	return fmt.Sprintf("malformed request: %s: %s", e.Field, e.Detail)
}

func (e *MalformedError) Unwrap() error { return ErrMalformed }

// QuotaError says which quota a request would exceed. It wraps ErrQuota.
type QuotaError struct {
	Quota string // the quota's name, e.g. "max_vms"
	Limit int
	Want  int // the total the request would bring the tenant to
	// Detail, when set, is the whole message (quotas on what was used
	// rather than what a request adds).
	Detail string
}

func (e *QuotaError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("quota %s exceeded: %s", e.Quota, e.Detail)
	}
	return fmt.Sprintf("quota %s exceeded: the request needs %d, the limit is %d", e.Quota, e.Want, e.Limit)
}

// Unwrap makes errors.Is(err, ErrQuota) hold.
func (e *QuotaError) Unwrap() error { return ErrQuota }

// TooLargeError is a file or upload over its size bound; errors.Is matches
// ErrTooLarge.
type TooLargeError struct {
	Op   string
	Size int64 // -1 when unknown (an upload cut off while read)
	Max  int64 // the bound in bytes
	// Setting names what sets the bound (an environment variable, a policy
	// path): the problem document's field.
	Setting string
	// Bound says the bound and where it comes from in words, e.g. "1 MiB
	// (1048576 bytes), set by STOCKADE_MAX_FILE_BYTES"; empty: Max bytes.
	Bound string
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%s: too large: over the limit of %s", e.Op, e.bound())
	}
	return fmt.Sprintf("%s: too large: %d bytes, over the limit of %s", e.Op, e.Size, e.bound())
}

func (e *TooLargeError) bound() string {
	if e.Bound != "" {
		return e.Bound
	}
	return fmt.Sprintf("%d bytes", e.Max)
}

func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// UnavailableError is ErrUnavailable naming the service that is down
// ("hypervisor"); its problem type is "<service>-unavailable". Keep one per
// service as that service's sentinel (vmpool.ErrUnavailable).
type UnavailableError struct {
	Service string // lowercase, words separated by spaces
}

// Unavailable returns an *UnavailableError for service.
func Unavailable(service string) error { return &UnavailableError{Service: service} }

func (e *UnavailableError) Error() string { return e.Service + " unavailable" }

func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// CSRFError is a state-changing browser request refused by the CSRF
// protection (no token, a wrong one, or a cross-site request). It wraps
// ErrForbidden; its problem type is "csrf".
type CSRFError struct {
	Reason string // for logs; the client is told to reload and retry
}

func (e *CSRFError) Error() string { return "csrf: " + e.Reason }

func (e *CSRFError) Unwrap() error { return ErrForbidden }

// DetailError is Err with the sentence its problem document tells the
// client, in place of what ToProblem says by default for Err's kind (the
// message, or a fixed sentence for unauthorized).
type DetailError struct {
	Err    error
	Detail string
}

// WithDetail returns err with detail as what the client is told.
func WithDetail(err error, detail string) error { return &DetailError{Err: err, Detail: detail} }

func (e *DetailError) Error() string { return e.Detail }

func (e *DetailError) Unwrap() error { return e.Err }

// StatusError is a refusal whose status the transport decided before any
// handler ran (no route, method not allowed, the body limit, a body
// timeout). web/ turns its framework's errors into one. Err, when set, is
// the error it wraps.
type StatusError struct {
	Status int
	Detail string
	Err    error
}

func (e *StatusError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("status %d", e.Status)
	}
	return fmt.Sprintf("status %d: %s", e.Status, e.Detail)
}

func (e *StatusError) Unwrap() error { return e.Err }
