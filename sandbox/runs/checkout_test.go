package runs

import (
	"testing"

	"github.com/stockade-dev/stockade/tenants/workflow"
)

func TestCheckoutRepository(t *testing.T) {
	off := false
	tests := []struct {
		name string
		run  Run
		def  workflow.Definition
		want string
	}{
		{"the trigger's repository", Run{Repository: "acme/app"}, workflow.Definition{Repositories: []string{"acme/other"}}, "acme/app"},
		{"the workflow's one repository", Run{}, workflow.Definition{Repositories: []string{"acme/app"}}, "acme/app"},
		{"a wildcard names none", Run{}, workflow.Definition{Repositories: []string{"acme/*"}}, ""},
		{"several name none", Run{}, workflow.Definition{Repositories: []string{"acme/a", "acme/b"}}, ""},
		{"no repository", Run{}, workflow.Definition{}, ""},
		{"checkout: false", Run{Repository: "acme/app"}, workflow.Definition{Checkout: &off}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkoutRepository(tc.run, tc.def); got != tc.want {
				t.Errorf("Got(checkoutRepository) = %q; want %q", got, tc.want)
			}
		})
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"one\n", "one"},
		{"a\n\nb\nc\nfatal: Authentication failed\n", "b / c / fatal: Authentication failed"},
	}
	for _, tc := range tests {
		if got := lastLines(tc.in, 3); got != tc.want {
			t.Errorf("Got(lastLines(%q)) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
