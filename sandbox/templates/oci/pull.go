package oci

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// RegistriesEnv is the operator's list of registries tenants may pull
// template images from.
const RegistriesEnv = "STOCKADE_TEMPLATE_REGISTRIES"

// ParseRegistries reads RegistriesEnv: a comma list of registry hosts
// (host or host:port, as in an image reference; docker.io is Docker Hub).
func ParseRegistries(s string) ([]string, error) {
	var out []string
	for _, h := range strings.Split(s, ",") {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" {
			continue
		}
		reg, err := name.NewRegistry(h, name.StrictValidation)
		if err != nil || strings.ContainsAny(h, "/@") {
			return nil, fmt.Errorf("%s: %q is not a registry host", RegistriesEnv, h)
		}
		if !slices.Contains(out, reg.RegistryStr()) {
			out = append(out, reg.RegistryStr())
		}
	}
	return out, nil
}

// Credentials are registry credentials from a tenant secret: "USER:PASSWORD"
// (basic, also exchanged for a token), or a bare registry token. Hosts are
// where the secret may go: requests carrying it anywhere else fail.
type Credentials struct {
	Secret string
	Value  string
	Hosts  func(host string) bool
}

func (c *Credentials) authenticator() (authn.Authenticator, []string) {
	if user, pass, ok := strings.Cut(c.Value, ":"); ok {
		basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
		return authn.FromConfig(authn.AuthConfig{Username: user, Password: pass}), []string{basic}
	}
	return authn.FromConfig(authn.AuthConfig{RegistryToken: c.Value}), []string{"Bearer " + c.Value}
}

// Puller pulls images through the egress gateway.
type Puller struct {
	// Allowed are the registries of RegistriesEnv.
	Allowed []string
	// Dial connects as the tenant's traffic (egress.Gateway.DialAs).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// MaxBytes bounds the blobs pulled.
	MaxBytes int64
}

// ParseRef reads an image reference and checks its registry against the
// allowed ones.
func (p *Puller) ParseRef(ref string) (name.Reference, error) {
	if len(ref) > 1024 {
		return nil, errdefs.Invalid("image", "reference", "at most 1024 bytes")
	}
	r, err := name.ParseReference(strings.TrimSpace(ref), name.StrictValidation)
	if err != nil {
		return nil, errdefs.Invalid("image", "reference", "not an image reference (registry/repository:tag or @sha256:…): "+err.Error())
	}
	reg := r.Context().RegistryStr()
	if !slices.Contains(p.Allowed, reg) {
		allowed := "none is"
		if len(p.Allowed) > 0 {
			allowed = strings.Join(p.Allowed, ", ") + " are"
		}
		return nil, errdefs.Invalid("image", "registry_not_allowed",
			fmt.Sprintf("registry %s is not one the operator allows to pull templates from (%s: %s allowed)", reg, RegistriesEnv, allowed))
	}
	return r, nil
}

// Pull fetches ref's linux/amd64 image (its manifest and config checked;
// its layers are checked as Flatten reads them).
func (p *Puller) Pull(ctx context.Context, r name.Reference, cred *Credentials) (*Image, error) {
	base := &http.Transport{
		DialContext:           func(ctx context.Context, _, addr string) (net.Conn, error) { return p.Dial(ctx, addr) },
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		MaxIdleConnsPerHost:   4,
		ForceAttemptHTTP2:     true,
	}
	defer base.CloseIdleConnections()
	var rt http.RoundTripper = base
	opts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: PlatformOS, Architecture: PlatformArch})}
	if cred != nil {
		a, headers := cred.authenticator()
		rt = &scoped{base: base, headers: headers, hosts: cred.Hosts, secret: cred.Secret}
		opts = append(opts, remote.WithAuth(a))
	} else {
		opts = append(opts, remote.WithAuth(authn.Anonymous))
	}
	opts = append(opts, remote.WithTransport(rt))
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return nil, pullErr(r, err)
	}
	var im *Image
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, pullErr(r, err)
		}
		im, err = FromIndex(idx)
		if err != nil {
			return nil, err
		}
	case desc.MediaType.IsImage():
		img, err := desc.Image()
		if err != nil {
			return nil, pullErr(r, err)
		}
		if im, err = FromImage(img, desc.Descriptor); err != nil {
			return nil, err
		}
	default:
		return nil, refusal("manifest", "%s is a %s, not an image", r, desc.MediaType)
	}
	if n := im.CompressedSize(); p.MaxBytes > 0 && n > p.MaxBytes {
		return nil, &errdefs.TooLargeError{Op: "pull " + r.String(), Size: n, Max: p.MaxBytes}
	}
	return im, nil
}

// pullErr says what went wrong in words a tenant can act on.
func pullErr(r name.Reference, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return errdefs.Invalid("credentials_secret", "registry_auth", fmt.Sprintf("%s refused the credentials (or their absence): %d", r.Context().RegistryStr(), te.StatusCode))
		case http.StatusNotFound:
			return errdefs.Invalid("image", "not_found", fmt.Sprintf("%s: no such image in its registry", r))
		}
	}
	var se *scopeError
	if errors.As(err, &se) {
		return errdefs.Invalid("credentials_secret", "secret_hosts", se.Error())
	}
	return errdefs.Invalid("image", "pull", fmt.Sprintf("pull %s: %v", r, err))
}

// scoped refuses to send the secret's own Authorization values to a host
// the secret is not scoped to (a token realm elsewhere must be listed in
// the secret's hosts too).
type scoped struct {
	base    http.RoundTripper
	headers []string
	hosts   func(string) bool
	secret  string
}

type scopeError struct{ secret, host string }

func (e *scopeError) Error() string {
	return fmt.Sprintf("secret %s may not be sent to %s (add the host to the secret's hosts)", e.secret, e.host)
}

func (s *scoped) RoundTrip(req *http.Request) (*http.Response, error) {
	if slices.Contains(s.headers, req.Header.Get("Authorization")) && !s.hosts(req.URL.Hostname()) {
		return nil, &scopeError{secret: s.secret, host: req.URL.Hostname()}
	}
	return s.base.RoundTrip(req)
}
