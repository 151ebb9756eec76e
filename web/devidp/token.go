package devidp

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// codeVerifierRE is the code_verifier syntax of RFC 7636 4.1.
var codeVerifierRE = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)

// tokenError writes an RFC 6749 5.2 error response.
func tokenError(w http.ResponseWriter, status int, code, description string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="stockade-dev-idp"`)
	}
	writeJSON(w, status, map[string]string{"error": code, "error_description": description})
}

// authenticateClient implements client_secret_basic and client_secret_post (RFC 6749 2.3.1).
// It returns the client, or writes the error response and returns false.
func (p *Provider) authenticateClient(w http.ResponseWriter, r *http.Request) (Client, bool) {
	id, secret, basic := r.BasicAuth()
	if basic {
		// The Basic credentials are form-encoded before base64 (RFC 6749 2.3.1).
		var err1, err2 error
		id, err1 = url.QueryUnescape(id)
		secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil {
			tokenError(w, http.StatusUnauthorized, "invalid_client", "malformed client credentials")
			return Client{}, false
		}
		if r.PostForm.Has("client_secret") {
			tokenError(w, http.StatusBadRequest, "invalid_request", "use one client authentication method")
			return Client{}, false
		}
		if formID := r.PostForm.Get("client_id"); formID != "" && formID != id {
			tokenError(w, http.StatusBadRequest, "invalid_request", "client_id does not match the authenticated client")
			return Client{}, false
		}
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	client, ok := p.clients[id]
	// Compare even for an unknown client so timing does not tell which ids exist.
	want := client.Secret
	if !ok {
		want = "\x00unknown client"
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(want)) != 1 || !ok || secret == "" {
		tokenError(w, http.StatusUnauthorized, "invalid_client", "client authentication failed")
		return Client{}, false
	}
	return client, true
}

// s256 is the PKCE S256 transformation (RFC 7636 4.2).
func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func (p *Provider) serveToken(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		tokenError(w, http.StatusBadRequest, "invalid_request", "malformed form")
		return
	}
	client, ok := p.authenticateClient(w, r)
	if !ok {
		p.cfg.Logger.InfoContext(r.Context(), "development identity provider rejected client authentication")
		return
	}
	if gt := r.PostForm.Get("grant_type"); gt != "authorization_code" {
		tokenError(w, http.StatusBadRequest, "unsupported_grant_type", "only authorization_code is supported")
		return
	}
	code := r.PostForm.Get("code")
	verifier := r.PostForm.Get("code_verifier")
	redirectURI := r.PostForm.Get("redirect_uri")
	accessToken, err := randomToken()
	if err != nil {
		tokenError(w, http.StatusInternalServerError, "server_error", "cannot make a token")
		return
	}

	now := p.cfg.Clock()
	g, reason := p.redeem(now, client.ID, code, redirectURI, verifier, accessToken)
	if g == nil {
		p.cfg.Logger.InfoContext(r.Context(), "development identity provider rejected code",
			"client_id", client.ID, "reason", reason)
		tokenError(w, http.StatusBadRequest, "invalid_grant", reason)
		return
	}

	idToken, err := p.signIDToken(g, now)
	if err != nil {
		p.cfg.Logger.ErrorContext(r.Context(), "development identity provider cannot sign ID token", "error", err)
		tokenError(w, http.StatusInternalServerError, "server_error", "cannot sign the ID token")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": accessToken,
		"token_type":   "Bearer",
		"expires_in":   int64(p.cfg.TokenTTL / time.Second),
		"id_token":     idToken,
		"scope":        g.scope,
	})
}

// redeem consumes an authorization code and binds accessToken to it. It returns nil and a reason
// safe to show the client when the code must not be honoured.
func (p *Provider) redeem(now time.Time, clientID, code, redirectURI, verifier, accessToken string) (*grant, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pruneLocked(now)

	g, ok := p.codes[code]
	if !ok || g.clientID != clientID {
		return nil, "unknown or expired code"
	}
	if g.redeemed {
		// A replay: deny it and revoke what the first redemption got (RFC 6749 4.1.2).
		delete(p.tokens, g.accessToken)
		g.accessToken = ""
		return nil, "code already used"
	}
	// Any attempt by the right client uses the code up, so a verifier cannot be guessed.
	g.redeemed = true
	if now.After(g.codeExpiry) {
		return nil, "unknown or expired code"
	}
	if redirectURI != g.redirectURI {
		return nil, "redirect_uri does not match the authorization request"
	}
	if !codeVerifierRE.MatchString(verifier) ||
		subtle.ConstantTimeCompare([]byte(s256(verifier)), []byte(g.codeChallenge)) != 1 {
		return nil, "code_verifier does not match the code_challenge"
	}
	g.accessToken = accessToken
	g.tokenExpiry = now.Add(p.cfg.TokenTTL)
	p.tokens[accessToken] = g
	return g, ""
}

// userClaims are the claims the granted scopes release (OIDC Core 5.4).
func userClaims(g *grant) map[string]any {
	c := map[string]any{"sub": g.user.Subject}
	scopes := strings.Fields(g.scope)
	if slices.Contains(scopes, "email") {
		c["email"] = g.user.Email
		// The developer typed it; "verified" is what a real provider would assert and what
		// the relying party will check.
		c["email_verified"] = true
	}
	if slices.Contains(scopes, "profile") {
		c["name"] = g.user.Name
	}
	return c
}

func (p *Provider) signIDToken(g *grant, now time.Time) (string, error) {
	claims := userClaims(g)
	claims["iss"] = p.cfg.Issuer
	claims["aud"] = g.clientID
	claims["iat"] = now.Unix()
	claims["exp"] = now.Add(p.cfg.TokenTTL).Unix()
	claims["auth_time"] = g.authTime.Unix()
	if g.nonce != "" {
		claims["nonce"] = g.nonce
	}
	if p.cfg.MutateClaims != nil {
		p.cfg.MutateClaims(claims)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	jws, err := p.signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

func (p *Provider) serveUserinfo(w http.ResponseWriter, r *http.Request) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	now := p.cfg.Clock()
	var g *grant
	if strings.EqualFold(scheme, "Bearer") && token != "" {
		p.mu.Lock()
		if cand, ok := p.tokens[token]; ok && !now.After(cand.tokenExpiry) {
			g = cand
		}
		p.mu.Unlock()
	}
	if g == nil {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token"})
		return
	}
	writeJSON(w, http.StatusOK, userClaims(g))
}
