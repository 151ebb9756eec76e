package errdefs_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// multi is a schema check's error: several fields at once.
type multi []error

func (m multi) Error() string   { return "the document does not match its schema" }
func (m multi) Unwrap() []error { return m }

// TestProblem: each error of the vocabulary, bare and wrapped as callers
// wrap it, maps to one status, problem type and set of fields; what the
// client is told never includes an internal error's words.
func TestProblem(t *testing.T) {
	f := func(field, rule, detail string) errdefs.ProblemField {
		return errdefs.ProblemField{Field: field, Rule: rule, Detail: detail}
	}
	tests := []struct {
		name   string
		err    error
		status int
		typ    string // after errdefs.ProblemBase; "about:blank" as is
		detail string // "" : not checked
		fields []errdefs.ProblemField
	}{
		{"not found", fmt.Errorf("get sandbox sb-1: %w", errdefs.ErrNotFound), 404, "not-found", "", nil},
		{"conflict", fmt.Errorf("create tenant: %w", errdefs.ErrConflict), 409, "conflict", "create tenant: conflict", nil},
		{"invalid", fmt.Errorf("policy: %w", errdefs.ErrInvalid), 422, "invalid", "policy: invalid", nil},
		{"field", fmt.Errorf("create: %w", errdefs.Invalid("slug", "slug_format", "must be lowercase")), 422, "invalid",
			"slug: must be lowercase", []errdefs.ProblemField{f("slug", "slug_format", "must be lowercase")}},
		{"fields", multi{errdefs.Invalid("/a", "type", "must be a string"), fmt.Errorf("x: %w", errdefs.Invalid("/b", "min", "at least 1"))}, 422, "invalid",
			"2 fields are invalid; see errors", []errdefs.ProblemField{f("/a", "type", "must be a string"), f("/b", "min", "at least 1")}},
		{"malformed", &errdefs.MalformedError{Field: "email", Detail: "must be a string"}, 400, "malformed",
			"malformed request: email: must be a string", []errdefs.ProblemField{f("email", "syntax", "must be a string")}},
		{"malformed, no field", &errdefs.MalformedError{Detail: "unexpected data"}, 400, "malformed", "malformed request: unexpected data", nil},
		{"quota", fmt.Errorf("create sandbox: %w", &errdefs.QuotaError{Quota: "max_vms", Limit: 2, Want: 3}), 429, "quota",
			"create sandbox: quota max_vms exceeded: the request needs 3, the limit is 2",
			[]errdefs.ProblemField{f("max_vms", "quota", "quota max_vms exceeded: the request needs 3, the limit is 2")}},
		{"quota sentinel", errdefs.ErrQuota, 429, "quota", "quota exceeded", nil},
		{"too large", &errdefs.TooLargeError{Op: "upload", Size: 10, Max: 4, Setting: "STOCKADE_MAX_FILE_BYTES", Bound: "4 bytes, set by STOCKADE_MAX_FILE_BYTES"},
			413, "too-large", "upload: too large: 10 bytes, over the limit of 4 bytes, set by STOCKADE_MAX_FILE_BYTES",
			[]errdefs.ProblemField{f("STOCKADE_MAX_FILE_BYTES", "max", "at most 4 bytes, set by STOCKADE_MAX_FILE_BYTES")}},
		{"too large sentinel", fmt.Errorf("read: %w", errdefs.ErrTooLarge), 413, "too-large", "read: too large", nil},
		{"no space", fmt.Errorf("write: %w", errdefs.ErrNoSpace), 507, "no-space", "write: no space left in the sandbox", nil},
		{"hypervisor unavailable", fmt.Errorf("start vm: %w: no host", errdefs.Unavailable("hypervisor")), 503, "hypervisor-unavailable",
			"start vm: hypervisor unavailable: no host", nil},
		{"unavailable", fmt.Errorf("secrets: %w", errdefs.ErrUnavailable), 503, "unavailable", "secrets: unavailable", nil},
		{"unauthorized", errdefs.ErrUnauthorized, 401, "unauthorized", "send a valid API token as 'Authorization: Bearer <token>', or sign in", nil},
		{"unauthorized with its own detail", errdefs.WithDetail(errdefs.ErrUnauthorized, "bad or missing X-Hub-Signature-256"), 401, "unauthorized",
			"bad or missing X-Hub-Signature-256", nil},
		{"forbidden", errdefs.WithDetail(errdefs.ErrForbidden, "the auditor role does not allow policy.write"), 403, "forbidden",
			"the auditor role does not allow policy.write", nil},
		{"forbidden sentinel", fmt.Errorf("read file: %w", errdefs.ErrForbidden), 403, "forbidden", "read file: forbidden", nil},
		{"csrf", &errdefs.CSRFError{Reason: "missing or invalid token"}, 403, "csrf", "missing or invalid CSRF token: reload the page and try again", nil},
		// The type decides, not the words: a message about CSRF is no CSRF refusal.
		{"the word csrf", &errdefs.StatusError{Status: 400, Detail: "bad csrf field"}, 400, "about:blank", "bad csrf field", nil},
		{"the word csrf, internal", errors.New("csrf store broken"), 500, "internal", "something went wrong on our side; the request id helps the operator find it", nil},
		{"status", &errdefs.StatusError{Status: 405, Detail: "Method Not Allowed"}, 405, "about:blank", "", nil},
		{"status 413", &errdefs.StatusError{Status: 413, Detail: "Request Entity Too Large"}, 413, "too-large", "the request body is larger than this endpoint accepts", nil},
		{"status wrapping a domain error", &errdefs.StatusError{Status: 400, Err: errdefs.ErrNotFound}, 404, "not-found", "", nil},
		{"internal", errors.New("pq: connection refused to 10.0.0.5"), 500, "internal", "something went wrong on our side; the request id helps the operator find it", nil},
		{"internal keeps its fixed detail", errdefs.WithDetail(errors.New("disk on fire"), "oops"), 500, "internal",
			"something went wrong on our side; the request id helps the operator find it", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := errdefs.ToProblem(tt.err)
			typ := errdefs.ProblemBase + tt.typ
			if tt.typ == "about:blank" {
				typ = tt.typ
			}
			if p.Status != tt.status || p.Type != typ {
				t.Errorf("Got(ToProblem(%v)) = %d %s; want %d %s", tt.err, p.Status, p.Type, tt.status, typ)
			}
			if got := errdefs.HTTPStatus(tt.err); got != tt.status {
				t.Errorf("Got(HTTPStatus(%v)) = %d; want %d", tt.err, got, tt.status)
			}
			if tt.detail != "" && p.Detail != tt.detail {
				t.Errorf("Got(detail) = %q; want %q", p.Detail, tt.detail)
			}
			if tt.typ == "not-found" && p.Detail != "" {
				t.Errorf("Got(detail of not found) = %q; want none", p.Detail)
			}
			if !slices.Equal(p.Errors, tt.fields) {
				t.Errorf("Got(fields) = %+v; want %+v", p.Errors, tt.fields)
			}
			if p.Title == "" {
				t.Errorf("Got(title) = %q; want one", p.Title)
			}
		})
	}
}

// TestIs: the helpers and the typed errors agree with errors.Is, and the
// typed errors match their sentinels.
func TestIs(t *testing.T) {
	hyp := errdefs.Unavailable("hypervisor")
	tests := []struct {
		name string
		err  error
		is   func(error) bool
		want bool
	}{
		{"field is invalid", errdefs.Invalid("a", "b", "c"), errdefs.IsInvalid, true},
		{"malformed is malformed", &errdefs.MalformedError{}, errdefs.IsMalformed, true},
		{"malformed is not invalid", &errdefs.MalformedError{}, errdefs.IsInvalid, false},
		{"quota error is quota", &errdefs.QuotaError{}, errdefs.IsQuota, true},
		{"too large error is too large", &errdefs.TooLargeError{}, errdefs.IsTooLarge, true},
		{"service unavailable is unavailable", fmt.Errorf("x: %w", hyp), errdefs.IsUnavailable, true},
		{"csrf is forbidden", &errdefs.CSRFError{}, errdefs.IsForbidden, true},
		{"csrf is csrf", fmt.Errorf("x: %w", &errdefs.CSRFError{}), errdefs.IsCSRF, true},
		{"forbidden is not csrf", errdefs.ErrForbidden, errdefs.IsCSRF, false},
		{"detail keeps its kind", errdefs.WithDetail(errdefs.ErrConflict, "taken"), errdefs.IsConflict, true},
		{"not found", fmt.Errorf("x: %w", errdefs.ErrNotFound), errdefs.IsNotFound, true},
		{"no space", errdefs.ErrNoSpace, errdefs.IsNoSpace, true},
		{"unauthorized", errdefs.ErrUnauthorized, errdefs.IsUnauthorized, true},
		{"unauthorized is not forbidden", errdefs.ErrUnauthorized, errdefs.IsForbidden, false},
	}
	for _, tt := range tests {
		if got := tt.is(tt.err); got != tt.want {
			t.Errorf("Got(%s) = %v; want %v", tt.name, got, tt.want)
		}
	}
	// One service's sentinel is not another's.
	if other := errdefs.Unavailable("secrets"); errors.Is(other, hyp) || !errors.Is(fmt.Errorf("w: %w", hyp), hyp) {
		t.Errorf("Got(errors.Is across services) = %v, (wrapped self) %v; want false, true", errors.Is(other, hyp), errors.Is(fmt.Errorf("w: %w", hyp), hyp))
	}
}
