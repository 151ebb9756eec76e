package schema_test

import (
	"errors"
	"testing"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/schema"
)

const doc = `{"type":"object","additionalProperties":false,"required":["name"],
 "properties":{"name":{"type":"string","pattern":"^[a-z]+$"},"a/b":{"type":"integer","maximum":3}}}`

func TestCheck(t *testing.T) {
	s, err := schema.Compile("https://example.test/s.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	words := schema.Words{
		Unknown: func(name string) string { return name + " is unknown" },
		Pattern: func(loc []string, got string) string { return got + " is not lowercase" },
	}
	for _, tt := range []struct {
		in         any
		want       map[string]string // field -> rule
		wantDetail string
	}{
		{map[string]any{"name": "ok"}, map[string]string{}, ""},
		{map[string]any{}, map[string]string{"/name": "required"}, ""},
		{map[string]any{"name": "Bad"}, map[string]string{"/name": "pattern"}, "Bad is not lowercase"},
		{map[string]any{"name": "ok", "x": 1.0}, map[string]string{"/x": "unknown"}, "x is unknown"},
		{map[string]any{"name": "ok", "a/b": 9.0}, map[string]string{"/a~1b": "maximum"}, ""},
	} {
		errs, err := s.Check(tt.in, words)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, e := range errs {
			got[e.Field] = e.Rule
			if tt.wantDetail != "" && e.Detail != tt.wantDetail {
				t.Errorf("Got(detail of %s) = %q; want %q", e.Field, e.Detail, tt.wantDetail)
			}
		}
		if len(got) != len(tt.want) {
			t.Errorf("Got(Check(%v)) = %v; want %v", tt.in, got, tt.want)
		}
		for f, r := range tt.want {
			if got[f] != r {
				t.Errorf("Got(Check(%v)[%s]) = %q; want %q", tt.in, f, got[f], r)
			}
		}
		if len(errs) > 0 && !errors.Is(errs, errdefs.ErrInvalid) {
			t.Errorf("Got(errors.Is(errs, ErrInvalid)) = false; want true")
		}
	}
}
