package authn

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	flowCookieName = "stockade_login"
	flowTTL        = 10 * time.Minute
	maxReturnTo    = 1024
	// macContext separates this MAC from any other use of the same key.
	macContext = "stockade login flow v1\x00"
)

// flow is what Begin remembers for Finish, in the browser, signed.
type flow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	ReturnTo string `json:"r"`
	Expires  int64  `json:"e"` // unix seconds
}

func flowMAC(key []byte, payload string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(macContext))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// sealFlow encodes f as base64url(JSON) "." base64url(HMAC-SHA256).
func sealFlow(key []byte, f flow) (string, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return "", fmt.Errorf("encode flow: %w", err)
	}
	payload := base64.RawURLEncoding.EncodeToString(body)
	return payload + "." + base64.RawURLEncoding.EncodeToString(flowMAC(key, payload)), nil
}

// openFlow checks the MAC and the expiry and decodes the flow.
func openFlow(key []byte, value string, now time.Time) (flow, error) {
	payload, sig, ok := strings.Cut(value, ".")
	if !ok {
		return flow{}, fmt.Errorf("%w: malformed", errFlowCookie)
	}
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(mac, flowMAC(key, payload)) {
		return flow{}, fmt.Errorf("%w: bad signature", errFlowCookie)
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return flow{}, fmt.Errorf("%w: malformed", errFlowCookie)
	}
	var f flow
	if err := json.Unmarshal(body, &f); err != nil {
		return flow{}, fmt.Errorf("%w: malformed", errFlowCookie)
	}
	if now.Unix() >= f.Expires {
		return flow{}, fmt.Errorf("%w: expired", errFlowCookie)
	}
	if f.State == "" || f.Nonce == "" || f.Verifier == "" {
		return flow{}, fmt.Errorf("%w: incomplete", errFlowCookie)
	}
	return f, nil
}

func (rp *RP) readFlow(r *http.Request) (flow, error) {
	c, err := r.Cookie(flowCookieName)
	if errors.Is(err, http.ErrNoCookie) || (err == nil && c.Value == "") {
		return flow{}, fmt.Errorf("%w: missing (cookies blocked, login started elsewhere, or already used)", errFlowCookie)
	}
	if err != nil {
		return flow{}, fmt.Errorf("%w: %w", errFlowCookie, err)
	}
	return openFlow(rp.cfg.CookieKey, c.Value, rp.cfg.Clock())
}

// SafeReturnTo returns p if it is a path on this site, else "/". It refuses anything a
// browser could read as another origin: "//host", "/\host", schemes, control characters.
func SafeReturnTo(p string) string {
	if p == "" || len(p) > maxReturnTo || p[0] != '/' {
		return "/"
	}
	if len(p) > 1 && (p[1] == '/' || p[1] == '\\') {
		return "/"
	}
	for _, r := range p {
		// Browsers treat "\" as "/" and drop tabs and newlines inside URLs, so either could
		// turn a path into "//host" after the check above.
		if r < 0x20 || r == 0x7f || r == '\\' {
			return "/"
		}
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	return p
}
