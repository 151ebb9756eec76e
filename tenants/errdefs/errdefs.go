// Package errdefs is Stockade's error vocabulary: the sentinels and typed
// errors every layer wraps (store, services, handlers, the GitHub receiver)
// and the one mapper, ToProblem, that turns any of them into an HTTP status, the
// fields at fault and an RFC 9457 problem document. It imports only the
// standard library, so no package imports a domain package just to spell an
// error (containerd's errdefs is the precedent).
//
// Wrap a sentinel with %w naming the operation ("create vm: %w"), or return
// one of the typed errors, which match their sentinel with errors.Is. Test
// with errors.Is or the Is* helpers, never by message.
package errdefs

import "errors"

// The sentinels. Their messages are part of what clients read (a problem's
// detail is usually the error's message), so they stay short.
var (
	// ErrNotFound: no such object for this caller. Another tenant's object is
	// not found too, never forbidden. 404, with no detail.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request does not fit the object's current state
	// (it exists already, it changed since it was read, it is frozen). 409.
	ErrConflict = errors.New("conflict")
	// ErrInvalid: a well-formed request whose values are wrong. 422; a
	// *FieldError names the field.
	ErrInvalid = errors.New("invalid")
	// ErrMalformed: a request body or parameter that could not be decoded at
	// all. 400; a *MalformedError names where.
	ErrMalformed = errors.New("malformed request")
	// ErrQuota: the request would exceed a tenant quota. 429; a *QuotaError
	// names the quota.
	ErrQuota = errors.New("quota exceeded")
	// ErrUnauthorized: no valid credentials. 401 (pages redirect to sign-in).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: valid credentials that do not allow this. 403.
	ErrForbidden = errors.New("forbidden")
	// ErrUnavailable: a service the request needs cannot serve it now;
	// retrying later may work. 503; an *UnavailableError names the service.
	ErrUnavailable = errors.New("unavailable")
	// ErrTooLarge: a body, file or upload over its size bound. 413; a
	// *TooLargeError names the bound and the setting it comes from.
	ErrTooLarge = errors.New("too large")
	// ErrNoSpace: the sandbox's disk or workspace is full. 507.
	ErrNoSpace = errors.New("no space left in the sandbox")
)

// IsNotFound reports whether err is, or wraps, ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsConflict reports whether err is, or wraps, ErrConflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsInvalid reports whether err is, or wraps, ErrInvalid.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// IsMalformed reports whether err is, or wraps, ErrMalformed.
func IsMalformed(err error) bool { return errors.Is(err, ErrMalformed) }

// IsQuota reports whether err is, or wraps, ErrQuota.
func IsQuota(err error) bool { return errors.Is(err, ErrQuota) }

// IsUnauthorized reports whether err is, or wraps, ErrUnauthorized.
func IsUnauthorized(err error) bool { return errors.Is(err, ErrUnauthorized) }

// IsForbidden reports whether err is, or wraps, ErrForbidden (a CSRF refusal
// is one).
func IsForbidden(err error) bool { return errors.Is(err, ErrForbidden) }

// IsUnavailable reports whether err is, or wraps, ErrUnavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// IsTooLarge reports whether err is, or wraps, ErrTooLarge.
func IsTooLarge(err error) bool { return errors.Is(err, ErrTooLarge) }

// IsNoSpace reports whether err is, or wraps, ErrNoSpace.
func IsNoSpace(err error) bool { return errors.Is(err, ErrNoSpace) }

// IsCSRF reports whether err is, or wraps, a *CSRFError.
func IsCSRF(err error) bool {
	var ce *CSRFError
	return errors.As(err, &ce)
}
