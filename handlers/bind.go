package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants/errdefs"
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
