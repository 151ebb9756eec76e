package workflow_test

import (
	"reflect"
	"testing"
)

// TestParseTemplateNames: a workflow names any template by name, a
// built-in (node, build) or one of the tenant's own; whether the tenant can
// see it is the sandbox service's to say when the run's sandbox is made.
// A name that cannot be a template's is refused at sandbox.template.
func TestParseTemplateNames(t *testing.T) {
	p := parser(t)
	const base = "name: a\ntriggers:\n  - event: manual\nsteps:\n  - {name: s, run: x}\nsandbox:\n  template: "
	for _, name := range []string{"node", "build", "debian", "acme-tools_2", "node20"} {
		d, err := p.Parse([]byte(base + name + "\n"))
		if err != nil || d.Sandbox.Template != name {
			t.Errorf("Parse(template: %s) = %q, %v; want it named", name, d.Sandbox.Template, err)
		}
	}
	for _, name := range []string{"Node", "../debian", "\"a b\"", "-x"} {
		_, err := p.Parse([]byte(base + name + "\n"))
		if err == nil {
			t.Errorf("Parse(template: %s) = nil; want an error at /sandbox/template", name)
			continue
		}
		if got := fieldLines(t, err); !reflect.DeepEqual(got, []string{"/sandbox/template@7"}) {
			t.Errorf("Parse(template: %s) fields = %v; want [/sandbox/template@7] (%v)", name, got, err)
		}
	}
}
