package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// decodeJSON decodes exactly one JSON object into v, rejecting unknown
// fields, wrong types and trailing data, and naming the field at fault.
// Body size is already bounded by web/'s body limit.
func decodeJSON(c echo.Context, v any) error {
	ct := c.Request().Header.Get(echo.HeaderContentType)
	if mt, _, _ := mime.ParseMediaType(ct); mt != "application/json" {
		return &errdefs.MalformedError{Field: "Content-Type", Detail: "must be application/json"}
	}
	dec := json.NewDecoder(c.Request().Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &errdefs.MalformedError{Detail: "unexpected data after the JSON object"}
	}
	return nil
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var he *echo.HTTPError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &he):
		return he // e.g. 413 from the body limit
	case errors.As(err, &mbe):
		return echo.ErrStatusRequestEntityTooLarge
	case errors.As(err, &syn):
		return &errdefs.MalformedError{Field: "body", Detail: fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, syn)}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return &errdefs.MalformedError{Field: field, Detail: fmt.Sprintf("must be a JSON %s, not %s", typ.Type.Kind(), typ.Value)}
	case errors.Is(err, io.EOF):
		return &errdefs.MalformedError{Field: "body", Detail: "empty body; a JSON object is required"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &errdefs.MalformedError{Field: "body", Detail: "truncated JSON"}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for unknown fields.
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &errdefs.MalformedError{Field: name, Detail: "unknown field"}
	}
	return &errdefs.MalformedError{Field: "body", Detail: err.Error()}
}

// fieldErrors turns a validation error into per-field messages for a form:
// every *errdefs.FieldError in err (a validator reports all the fields at
// fault at once), the first message per field. An error without any is
// returned as is.
func fieldErrors(err error) (map[string]string, error) {
	all := errdefs.FieldErrors(err)
	if len(all) == 0 {
		return nil, err
	}
	out := make(map[string]string, len(all))
	for _, fe := range all {
		if _, ok := out[fe.Field]; !ok {
			out[fe.Field] = fe.Detail
		}
	}
	return out, nil
}

// conflictAsField turns a conflict into a field error for forms, to show
// next to the field; the page's status stays the conflict's (ask
// errdefs.HTTPStatus before).
func conflictAsField(err error, field, rule, detail string) error {
	if errdefs.IsConflict(err) {
		return errdefs.Invalid(field, rule, detail)
	}
	return err
}

// refusal is how a form page shows a refused post again.
type refusal struct {
	// Conflict, when set, is the field error a conflict shows as (a name
	// taken, a limit reached).
	Conflict *errdefs.FieldError
	// Quota, when set, says above the form what a quota refusal means
	// (the quota is the tenant's, not a field's).
	Quota func(err error) string
	// Keep adds to the form's messages once they are known (a secret
	// form asks for its value again).
	Keep func(errs map[string]string)
}

// reshow answers a refused form post with the page again: every field
// error next to its field (in *errs, which page renders), the input kept
// by the caller's form, and the status the API answers for err (asked of
// errdefs before a conflict becomes a field error). An error naming no
// field goes to web/'s error page as is.
func reshow(c echo.Context, err error, r refusal, errs *map[string]string, page func() (templ.Component, error)) error {
	status := errdefs.HTTPStatus(err)
	if r.Conflict != nil && errdefs.IsConflict(err) {
		err = r.Conflict
	}
	var m map[string]string
	if r.Quota != nil && errdefs.IsQuota(err) && len(errdefs.FieldErrors(err)) == 0 {
		m = map[string]string{views.FormError: r.Quota(err)}
	} else if m, err = fieldErrors(err); err != nil {
		return err
	}
	if r.Keep != nil {
		r.Keep(m)
	}
	*errs = m
	comp, err := page()
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, status, comp)
}

// inputErrors is fieldErrors for a query that filters a page: every field
// a *errdefs.MalformedError or *errdefs.FieldError in err names (a period
// that is no date, outcome not one of the list), the first message per
// field; nil when err names none.
func inputErrors(err error) map[string]string {
	out := map[string]string{}
	var walk func(error)
	walk = func(err error) {
		var me *errdefs.MalformedError
		var fe *errdefs.FieldError
		switch {
		case errors.As(err, &fe) && err == error(fe):
			if _, ok := out[fe.Field]; !ok {
				out[fe.Field] = fe.Detail
			}
		case errors.As(err, &me) && err == error(me) && me.Field != "":
			if _, ok := out[me.Field]; !ok {
				out[me.Field] = me.Detail
			}
		default:
			switch u := err.(type) {
			case interface{ Unwrap() []error }:
				for _, e := range u.Unwrap() {
					walk(e)
				}
			case interface{ Unwrap() error }:
				if e := u.Unwrap(); e != nil {
					walk(e)
				}
			}
		}
	}
	walk(err)
	if len(out) == 0 {
		return nil
	}
	return out
}
