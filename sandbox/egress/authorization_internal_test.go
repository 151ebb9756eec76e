package egress

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestSwapAuthorization(t *testing.T) {
	const ph, real = "stockade-placeholder-GH_TOKEN-abc234", "ghp_RealToken_1"
	repl := strings.NewReplacer(ph, real)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	raw := func(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name, in, want string
	}{
		{"basic password", "Basic " + b64("x-access-token:"+ph), "Basic " + b64("x-access-token:"+real)},
		{"basic user", "Basic " + b64(ph+":x-oauth-basic"), "Basic " + b64(real+":x-oauth-basic")},
		{"scheme in lower case", "basic " + b64("git:"+ph), "basic " + b64("git:"+real)},
		{"unpadded base64", "Basic " + raw("u:"+ph+"x"), "Basic " + b64("u:"+real+"x")},
		{"bearer", "Bearer " + ph, "Bearer " + real},
		{"basic without placeholder is untouched", "Basic " + raw("user:pass1"), "Basic " + raw("user:pass1")},
		{"not base64 is untouched", "Basic %%%" + ph, "Basic %%%" + real},
		{"someone else's placeholder stays", "Basic " + b64("u:stockade-placeholder-OTHER-zzz"), "Basic " + b64("u:stockade-placeholder-OTHER-zzz")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := swapAuthorization(tc.in, repl); got != tc.want {
				t.Errorf("Got(swapAuthorization(%q)) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}
