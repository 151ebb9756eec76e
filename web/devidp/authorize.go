package devidp

import (
	"bytes"
	"html/template"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

const pageTitle = "Stockade development identity provider — not for production"

// authRequest is an authorization request (RFC 6749 4.1.1, RFC 7636 4.3, OIDC Core 3.1.2.1).
type authRequest struct {
	ClientID            string
	RedirectURI         string
	ResponseType        string
	Scope               string
	State               string
	Nonce               string
	CodeChallenge       string
	CodeChallengeMethod string
}

// authError is a rejected authorization request. With redirect set it goes back to the
// client's redirect URI as error= parameters; otherwise the redirect URI itself is not
// trustworthy and the user gets a 400 page (RFC 6749 4.1.2.1).
type authError struct {
	redirect    bool
	code        string
	description string
}

// codeChallengeRE matches a base64url SHA-256 digest without padding (RFC 7636 4.2).
var codeChallengeRE = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

func parseAuthRequest(v url.Values) authRequest {
	return authRequest{
		ClientID:            v.Get("client_id"),
		RedirectURI:         v.Get("redirect_uri"),
		ResponseType:        v.Get("response_type"),
		Scope:               v.Get("scope"),
		State:               v.Get("state"),
		Nonce:               v.Get("nonce"),
		CodeChallenge:       v.Get("code_challenge"),
		CodeChallengeMethod: v.Get("code_challenge_method"),
	}
}

// validate checks the request in the order RFC 6749 requires: client and redirect URI first,
// because until both are known good nothing may be sent to the redirect URI.
func (p *Provider) validate(req authRequest, prompt string) *authError {
	client, ok := p.clients[req.ClientID]
	if !ok {
		return &authError{code: "invalid_request", description: "unknown client_id"}
	}
	if req.RedirectURI == "" || !slices.Contains(client.RedirectURIs, req.RedirectURI) {
		return &authError{code: "invalid_request", description: "redirect_uri is not registered for this client"}
	}
	if req.ResponseType != "code" {
		return &authError{redirect: true, code: "unsupported_response_type", description: "only response_type=code is supported"}
	}
	if !slices.Contains(strings.Fields(req.Scope), "openid") {
		return &authError{redirect: true, code: "invalid_scope", description: "scope must contain openid"}
	}
	if req.CodeChallengeMethod != "S256" || !codeChallengeRE.MatchString(req.CodeChallenge) {
		return &authError{redirect: true, code: "invalid_request", description: "PKCE is required: code_challenge with code_challenge_method=S256"}
	}
	if len(req.State) > 1024 || len(req.Nonce) > 1024 {
		return &authError{redirect: true, code: "invalid_request", description: "state or nonce too long"}
	}
	if prompt == "none" {
		// There are no sessions here: every login goes through the form.
		return &authError{redirect: true, code: "login_required", description: "the development provider always shows its login form"}
	}
	return nil
}

// redirectTo builds the redirect URI with the response parameters added to its own query.
func redirectTo(redirectURI string, params url.Values) string {
	u, err := url.Parse(redirectURI)
	if err != nil { // cannot happen: registered URIs are parsed in New
		return redirectURI
	}
	q := u.Query()
	for k, vs := range params {
		for _, v := range vs {
			if v != "" {
				q.Set(k, v)
			}
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (p *Provider) rejectAuth(w http.ResponseWriter, r *http.Request, req authRequest, e *authError) {
	p.cfg.Logger.InfoContext(r.Context(), "development identity provider rejected authorization request",
		"client_id", req.ClientID, "error", e.code, "reason", e.description)
	if !e.redirect {
		p.renderPage(w, http.StatusBadRequest, "", pageData{Error: e.description})
		return
	}
	http.Redirect(w, r, redirectTo(req.RedirectURI, url.Values{
		"error":             {e.code},
		"error_description": {e.description},
		"state":             {req.State},
	}), http.StatusSeeOther)
}

func (p *Provider) serveAuthorizePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := parseAuthRequest(q)
	if e := p.validate(req, q.Get("prompt")); e != nil {
		p.rejectAuth(w, r, req, e)
		return
	}
	p.renderPage(w, http.StatusOK, req.RedirectURI, pageData{
		Request: &req,
		Action:  p.prefix + "/authorize",
		Email:   p.cfg.DefaultEmail,
		Name:    p.cfg.DefaultName,
	})
}

func (p *Provider) serveAuthorizeSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		p.renderPage(w, http.StatusBadRequest, "", pageData{Error: "malformed form"})
		return
	}
	req := parseAuthRequest(r.PostForm)
	if e := p.validate(req, ""); e != nil {
		p.rejectAuth(w, r, req, e)
		return
	}
	if r.PostForm.Get("action") == "deny" {
		p.rejectAuth(w, r, req, &authError{redirect: true, code: "access_denied", description: "the user cancelled the login"})
		return
	}

	email := strings.TrimSpace(r.PostForm.Get("email"))
	name := strings.TrimSpace(r.PostForm.Get("name"))
	if msg := checkUser(email, name); msg != "" {
		p.renderPage(w, http.StatusBadRequest, req.RedirectURI, pageData{
			Request: &req, Action: p.prefix + "/authorize", Email: email, Name: name, Error: msg,
		})
		return
	}
	if name == "" {
		name, _, _ = strings.Cut(email, "@")
	}

	code, err := randomToken()
	if err != nil {
		p.rejectAuth(w, r, req, &authError{redirect: true, code: "server_error", description: "cannot make a code"})
		return
	}
	now := p.cfg.Clock()
	g := &grant{
		clientID:      req.ClientID,
		redirectURI:   req.RedirectURI,
		codeChallenge: req.CodeChallenge,
		nonce:         req.Nonce,
		scope:         req.Scope,
		user:          user{Subject: subject(email), Email: email, Name: name},
		authTime:      now,
		codeExpiry:    now.Add(codeTTL),
	}
	p.mu.Lock()
	p.pruneLocked(now)
	full := len(p.codes) >= maxGrants
	if !full {
		p.codes[code] = g
	}
	p.mu.Unlock()
	if full {
		p.rejectAuth(w, r, req, &authError{redirect: true, code: "temporarily_unavailable", description: "too many pending logins"})
		return
	}
	p.cfg.Logger.InfoContext(r.Context(), "development identity provider login",
		"client_id", req.ClientID, "email", email, "sub", g.user.Subject)
	http.Redirect(w, r, redirectTo(req.RedirectURI, url.Values{
		"code":  {code},
		"state": {req.State},
	}), http.StatusSeeOther)
}

// checkUser returns a message for the form, or "" when the input is acceptable.
func checkUser(email, name string) string {
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email || len(email) > 254 {
		return "Enter a plain email address, like dev@example.com."
	}
	if !utf8.ValidString(name) || len(name) > 200 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "Enter a display name of at most 200 printable characters."
	}
	return ""
}

type pageData struct {
	Title   string
	Request *authRequest // nil on the error page
	Action  string
	Email   string
	Name    string
	Error   string
}

// The page has no script and no style: its CSP can then forbid both outright.
var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{{.Title}}</title>
</head>
<body>
<h1>{{.Title}}</h1>
<p><strong>Development only.</strong> This built-in identity provider lets anyone sign in as any
email address without a password. Configure STOCKADE_OIDC_ISSUER to use a real provider.</p>
{{if .Error}}<p role="alert"><strong>Error:</strong> {{.Error}}</p>{{end}}
{{with .Request}}
<form method="post" action="{{$.Action}}">
<input type="hidden" name="client_id" value="{{.ClientID}}">
<input type="hidden" name="redirect_uri" value="{{.RedirectURI}}">
<input type="hidden" name="response_type" value="{{.ResponseType}}">
<input type="hidden" name="scope" value="{{.Scope}}">
<input type="hidden" name="state" value="{{.State}}">
<input type="hidden" name="nonce" value="{{.Nonce}}">
<input type="hidden" name="code_challenge" value="{{.CodeChallenge}}">
<input type="hidden" name="code_challenge_method" value="{{.CodeChallengeMethod}}">
<p><label>Email <input type="email" name="email" value="{{$.Email}}" required maxlength="254" autocomplete="email" autofocus></label></p>
<p><label>Display name <input type="text" name="name" value="{{$.Name}}" maxlength="200" autocomplete="name"></label></p>
<p><button type="submit" name="action" value="login">Sign in</button>
<button type="submit" name="action" value="deny" formnovalidate>Cancel</button></p>
</form>
{{end}}
</body>
</html>
`))

// renderPage renders into a buffer first so a template error is a clean 500. redirectURI, when
// set, is a registered redirect URI the form may end up at: CSP form-action also governs the
// redirect that follows a form submission.
func (p *Provider) renderPage(w http.ResponseWriter, status int, redirectURI string, data pageData) {
	data.Title = pageTitle
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, data); err != nil {
		http.Error(w, "render page", http.StatusInternalServerError)
		return
	}
	formAction := "'self'"
	if u, err := url.Parse(redirectURI); redirectURI != "" && err == nil {
		formAction += " " + u.Scheme + "://" + u.Host
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; form-action "+formAction+"; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
