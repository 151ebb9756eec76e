package handlers

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
	"github.com/stockade-dev/stockade/views"
)

func TestUTF8Prefix(t *testing.T) {
	tests := []struct {
		name         string
		carry, chunk string
		text, rest   string
	}{
		{"ascii", "", "hello\n", "hello\n", ""},
		{"empty", "", "", "", ""},
		{"cut after the first byte of é", "", "caf\xc3", "caf", "\xc3"},
		{"the rest of é arrives", "\xc3", "\xa9 ok", "é ok", ""},
		{"cut inside a 4-byte rune", "", "x\xf0\x9f\x98", "x", "\xf0\x9f\x98"},
		{"complete 4-byte rune", "", "x\xf0\x9f\x98\x80", "x😀", ""},
		// Bytes that can never complete are passed on, not held forever.
		{"stray continuation byte", "", "a\x80", "a\x80", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text, rest := utf8Prefix([]byte(tc.carry), []byte(tc.chunk))
			if string(text) != tc.text || string(rest) != tc.rest {
				t.Errorf("Got(utf8Prefix(%q, %q)) = %q, %q; want %q, %q", tc.carry, tc.chunk, text, rest, tc.text, tc.rest)
			}
		})
	}
}

func TestWorkflowErrors(t *testing.T) {
	p, err := workflow.NewParser()
	if err != nil {
		t.Fatal(err)
	}
	_, schemaErr := p.Parse([]byte("name: x\ntriggers:\n  - event: manual\nsteps:\n  - name: s\n    rn: true\n"))
	_, syntaxErr := p.Parse([]byte("name: x\nsteps: [\n"))
	tests := []struct {
		name string
		err  error
		want []views.WorkflowError
		ok   bool
	}{
		{"schema errors keep line and field", schemaErr, []views.WorkflowError{
			{Line: 5, Field: "/steps/0/run", Detail: "is required"},
			{Line: 6, Field: "/steps/0/rn", Detail: `"rn" is not a workflow setting here`},
		}, true},
		{"one field error", errdefs.Invalid("/", "unchanged", "the workflow is the same as version 2: nothing to save"),
			[]views.WorkflowError{{Field: "/", Detail: "the workflow is the same as version 2: nothing to save"}}, true},
		{"conflict", fmt.Errorf("%w: changed since", errdefs.ErrConflict), []views.WorkflowError{{Detail: "conflict: changed since"}}, true},
		{"other errors are not the document's", errors.New("disk full"), nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := workflowErrors(tc.err)
			if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Got(workflowErrors(%v)) = %+v, %v; want %+v, %v", tc.err, got, ok, tc.want, tc.ok)
			}
		})
	}
	t.Run("YAML syntax error names its line", func(t *testing.T) {
		got, ok := workflowErrors(syntaxErr)
		if !ok || len(got) != 1 || got[0].Line == 0 {
			t.Errorf("Got(workflowErrors(%v)) = %+v, %v; want one error with its line", syntaxErr, got, ok)
		}
	})
}
