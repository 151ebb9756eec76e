package secrets_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// TestNewSecretCheckAll: a new secret wrong in every field names every
// field, in the form's order, so the form shows them all at once; empty
// required fields say "required".
func TestNewSecretCheckAll(t *testing.T) {
	cases := []struct {
		name string
		in   secrets.NewSecret
		want string
	}{
		{"empty", secrets.NewSecret{}, "name/required,value/required,hosts/required"},
		{"all bad", secrets.NewSecret{Name: "9lower", Value: "a\nb", Hosts: []string{"*.com"}, Inject: []string{"cookie"}, TTL: time.Second},
			"name/secret_name,value/value_chars,hosts/host_pattern,inject/inject_location,ttl/ttl_range"},
		{"good", secrets.NewSecret{Name: "GITHUB_TOKEN", Value: "ghp_x", Hosts: []string{"API.github.com", "api.github.com"}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := c.in.Check()
			var got []string
			for _, fe := range errdefs.FieldErrors(err) {
				got = append(got, fe.Field+"/"+fe.Rule)
			}
			if strings.Join(got, ",") != c.want {
				t.Errorf("Got(field errors) = %v; want %s", got, c.want)
			}
			if c.want == "" && (err != nil || strings.Join(out.Hosts, ",") != "api.github.com" || out.TTL != secrets.DefaultTTL) {
				t.Errorf("Got(Check of a good secret) = %+v, %v; want hosts normalised, the default TTL", out, err)
			}
		})
	}
}
