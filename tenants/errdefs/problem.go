package errdefs

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail,omitempty"`
	Instance  string         `json:"instance,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
	Errors    []ProblemField `json:"errors,omitempty"`
}

// ProblemField names one field at fault.
type ProblemField struct {
	Field  string `json:"field"`
	Rule   string `json:"rule,omitempty"`
	Detail string `json:"detail"`
}

// ProblemBase prefixes every problem type of ours; the rest is the type's
// name ("not-found"), see Problem.Name.
const ProblemBase = "https://stockade.dev/problems/"

// Name is the problem type without ProblemBase ("not-found"), or the
// lowercased status text for a problem of no type of ours.
func (p Problem) Name() string {
	if n, ok := strings.CutPrefix(p.Type, ProblemBase); ok {
		return n
	}
	return strings.ToLower(strings.ReplaceAll(http.StatusText(p.Status), " ", "-"))
}

// HTTPStatus is ToProblem(err).Status: what a page that re-renders its form
// with err's messages answers, so that it answers what the API does.
func HTTPStatus(err error) int { return ToProblem(err).Status }

// ToProblem maps err to its problem document: status, type, title, detail and
// the fields at fault. It is the one place where errors become HTTP
// statuses; the API's error handler, every page that re-renders a form and
// the GitHub receiver ask it. An error of no kind here is a 500 whose detail
// says nothing about it.
func ToProblem(err error) Problem {
	p := problem(err)
	var de *DetailError
	if errors.As(err, &de) && p.Status != http.StatusInternalServerError {
		p.Detail = de.Detail
	}
	return p
}

func problem(err error) Problem {
	var (
		me  *MalformedError
		fe  *FieldError
		qe  *QuotaError
		tle *TooLargeError
		ue  *UnavailableError
		ce  *CSRFError
		se  *StatusError
	)
	switch {
	case errors.As(err, &me):
		p := Problem{Type: ProblemBase + "malformed", Title: "Malformed request", Status: http.StatusBadRequest, Detail: me.Error()}
		if me.Field != "" {
			p.Errors = []ProblemField{{Field: me.Field, Rule: "syntax", Detail: me.Detail}}
		}
		return p
	case errors.As(err, &fe):
		p := Problem{Type: ProblemBase + "invalid", Title: "Invalid input", Status: http.StatusUnprocessableEntity, Detail: fe.Error()}
		all := FieldErrors(err)
		if len(all) > 1 {
			p.Detail = fmt.Sprintf("%d fields are invalid; see errors", len(all))
		}
		for _, f := range all {
			p.Errors = append(p.Errors, ProblemField{Field: f.Field, Rule: f.Rule, Detail: f.Detail})
		}
		return p
	case errors.Is(err, ErrInvalid):
		return Problem{Type: ProblemBase + "invalid", Title: "Invalid input", Status: http.StatusUnprocessableEntity, Detail: err.Error()}
	case errors.Is(err, ErrNotFound):
		return Problem{Type: ProblemBase + "not-found", Title: "Not found", Status: http.StatusNotFound}
	case errors.Is(err, ErrConflict):
		return Problem{Type: ProblemBase + "conflict", Title: "Conflict", Status: http.StatusConflict, Detail: err.Error()}
	case errors.As(err, &qe):
		return Problem{Type: ProblemBase + "quota", Title: "Quota exceeded", Status: http.StatusTooManyRequests, Detail: err.Error(),
			Errors: []ProblemField{{Field: qe.Quota, Rule: "quota", Detail: qe.Error()}}}
	case errors.Is(err, ErrQuota):
		return Problem{Type: ProblemBase + "quota", Title: "Quota exceeded", Status: http.StatusTooManyRequests, Detail: err.Error()}
	case errors.As(err, &tle):
		p := Problem{Type: ProblemBase + "too-large", Title: "Too large", Status: http.StatusRequestEntityTooLarge, Detail: tle.Error()}
		if tle.Setting != "" {
			p.Errors = []ProblemField{{Field: tle.Setting, Rule: "max", Detail: "at most " + tle.bound()}}
		}
		return p
	case errors.Is(err, ErrTooLarge):
		return Problem{Type: ProblemBase + "too-large", Title: "Too large", Status: http.StatusRequestEntityTooLarge, Detail: err.Error()}
	case errors.Is(err, ErrNoSpace):
		return Problem{Type: ProblemBase + "no-space", Title: "No space left in the sandbox", Status: http.StatusInsufficientStorage, Detail: err.Error()}
	case errors.As(err, &ue):
		return Problem{Type: ProblemBase + strings.ReplaceAll(ue.Service, " ", "-") + "-unavailable", Title: capitalize(ue.Error()),
			Status: http.StatusServiceUnavailable, Detail: err.Error()}
	case errors.Is(err, ErrUnavailable):
		return Problem{Type: ProblemBase + "unavailable", Title: "Service unavailable", Status: http.StatusServiceUnavailable, Detail: err.Error()}
	case errors.Is(err, ErrUnauthorized):
		return Problem{Type: ProblemBase + "unauthorized", Title: "Authentication required", Status: http.StatusUnauthorized,
			Detail: "send a valid API token as 'Authorization: Bearer <token>', or sign in"}
	case errors.As(err, &ce):
		return Problem{Type: ProblemBase + "csrf", Title: "Forbidden", Status: http.StatusForbidden,
			Detail: "missing or invalid CSRF token: reload the page and try again"}
	case errors.Is(err, ErrForbidden):
		return Problem{Type: ProblemBase + "forbidden", Title: "Forbidden", Status: http.StatusForbidden, Detail: err.Error()}
	case errors.As(err, &se):
		p := Problem{Type: "about:blank", Title: http.StatusText(se.Status), Status: se.Status}
		if se.Detail != http.StatusText(se.Status) {
			p.Detail = se.Detail
		}
		if se.Status == http.StatusRequestEntityTooLarge {
			p.Type, p.Detail = ProblemBase+"too-large", "the request body is larger than this endpoint accepts"
		}
		return p
	}
	return Problem{Type: ProblemBase + "internal", Title: "Internal error", Status: http.StatusInternalServerError,
		Detail: "something went wrong on our side; the request id helps the operator find it"}
}

// FieldErrors returns every *FieldError in err's tree, in order.
func FieldErrors(err error) []*FieldError {
	return appendFieldErrors(nil, err)
}

func appendFieldErrors(out []*FieldError, err error) []*FieldError {
	if fe, ok := err.(*FieldError); ok {
		return append(out, fe)
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = appendFieldErrors(out, e)
		}
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			out = appendFieldErrors(out, e)
		}
	}
	return out
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
