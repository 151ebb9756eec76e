package egress

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants/secrets"
)

// TestSwapRequestScope: each placeholder is swapped only in the places its
// secret names; a secret not scoped to the host (Inject nil) nowhere.
func TestSwapRequestScope(t *testing.T) {
	creds := []secrets.Credential{
		{Name: "AUTH", Placeholder: "ph-auth-1", Value: "real-auth-1", Inject: []string{"authorization"}},
		{Name: "HDR", Placeholder: "ph-hdr-2", Value: "real-hdr-2", Inject: []string{"header:X-Api-Key"}},
		{Name: "QRY", Placeholder: "ph-qry-3", Value: "real q&3", Inject: []string{"query"}},
		{Name: "PTH", Placeholder: "ph-pth-4", Value: "real-pth-4", Inject: []string{"path"}},
		{Name: "BDY", Placeholder: "ph-bdy-5", Value: "real-bdy-5", Inject: []string{"body"}},
		{Name: "ELSE", Placeholder: "ph-else-6", Value: "real-else-6"},
	}
	all := "ph-auth-1 ph-hdr-2 ph-qry-3 ph-pth-4 ph-bdy-5 ph-else-6"
	body := strings.NewReader(all)
	req, err := http.NewRequest(http.MethodPost, "https://api.example.com/p/ph-auth-1/ph-pth-4?a=ph-qry-3&b=ph-bdy-5", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+all)
	req.Header.Set("X-Api-Key", all)
	req.Header.Set("X-Other", all)
	req.Header.Set("Range", "bytes=0-3")
	req.Header.Set("Accept-Encoding", "br, gzip")
	if err := newInjector(creds).swapRequest(req); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(req.Body)
	tests := []struct{ where, got, want string }{
		{"Authorization", req.Header.Get("Authorization"), "Bearer real-auth-1 ph-hdr-2 ph-qry-3 ph-pth-4 ph-bdy-5 ph-else-6"},
		{"X-Api-Key", req.Header.Get("X-Api-Key"), "ph-auth-1 real-hdr-2 ph-qry-3 ph-pth-4 ph-bdy-5 ph-else-6"},
		{"X-Other", req.Header.Get("X-Other"), all},
		{"path", req.URL.Path, "/p/ph-auth-1/real-pth-4"},
		{"query", req.URL.RawQuery, "a=real+q%263&b=ph-bdy-5"},
		{"body", string(b), "ph-auth-1 ph-hdr-2 ph-qry-3 ph-pth-4 real-bdy-5 ph-else-6"},
		{"Range", req.Header.Get("Range"), ""},
		{"Accept-Encoding", req.Header.Get("Accept-Encoding"), "gzip"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("Got(%s) = %q; want %q", tt.where, tt.got, tt.want)
		}
	}
	if req.ContentLength != int64(len(b)) {
		t.Errorf("Got(ContentLength) = %d; want %d", req.ContentLength, len(b))
	}
}

// TestShortValuesNotScrubbed: a value under MinScrubbedLen would match
// ordinary text; it is not searched for.
func TestShortValuesNotScrubbed(t *testing.T) {
	if p := secretPatterns("PIN", "1234", "ph"); p != nil {
		t.Errorf("Got(secretPatterns(4 bytes)) = %v; want none", p)
	}
	if p := secretPatterns("KEY", "123456", "ph"); len(p) == 0 {
		t.Errorf("Got(secretPatterns(6 bytes)) = none; want the value")
	}
}
