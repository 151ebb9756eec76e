package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// CSRFCookieName is the CSRF cookie; under https the __Host- prefix makes
// browsers accept it only Secure, for Path=/ and without Domain, so no
// sibling subdomain or plain-http page can plant one.
func CSRFCookieName(secure bool) string {
	if secure {
		return "__Host-stockade_csrf"
	}
	return "stockade_csrf"
}

// csrfMACContext separates this MAC from any other use of the cookie.
const csrfMACContext = "stockade csrf v1\x00"

// csrfKeyLen is the random bytes of the CSRF cookie.
const csrfKeyLen = 32

// csrfToken is the token forms and htmx send: HMAC-SHA256 keyed by the
// browser's CSRF cookie over the session id ("" before sign-in). A token
// minted for one session is worthless with another, even where an attacker
// could plant the cookie: they do not know the victim's session id.
func csrfToken(key []byte, sessionID string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(csrfMACContext))
	m.Write([]byte(sessionID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// The refusals are *errdefs.CSRFError: the error mapper turns them into a
// 403 problem of type "csrf" naming the token, by type, whatever the words.

// csrf protects cookie-authenticated state changes: every request that is
// not GET, HEAD, OPTIONS or TRACE must carry the token of this browser and
// session (X-CSRF-Token header or _csrf form field), and a browser that says
// the request is cross-site (Sec-Fetch-Site) is refused even with one. API
// calls with a bearer token carry no ambient credentials and skip it. Runs
// after authenticate, which establishes the session.
func (s *Server) csrf(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if b, _ := c.Get(bearerKey).(bool); b {
			return next(c)
		}
		req := c.Request()
		name := CSRFCookieName(s.cfg.SecureCookies)
		var key []byte
		if ck, err := c.Cookie(name); err == nil {
			if k, err := base64.RawURLEncoding.DecodeString(ck.Value); err == nil && len(k) == csrfKeyLen {
				key = k
			}
		}
		sessionID := ""
		if cl := handlers.CallerOf(c); cl.Session != nil {
			sessionID = cl.Session.ID
		}
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		default:
			if req.Header.Get("Sec-Fetch-Site") == "cross-site" {
				return &errdefs.CSRFError{Reason: "cross-site request (Sec-Fetch-Site)"}
			}
			sent := req.Header.Get("X-CSRF-Token")
			if sent == "" {
				sent = c.FormValue("_csrf")
			}
			if key == nil || sent == "" || !hmac.Equal([]byte(sent), []byte(csrfToken(key, sessionID))) {
				return &errdefs.CSRFError{Reason: "missing or invalid token"}
			}
		}
		if key == nil {
			key = make([]byte, csrfKeyLen)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			c.SetCookie(&http.Cookie{
				Name: name, Value: base64.RawURLEncoding.EncodeToString(key), Path: "/",
				MaxAge: 86400 * 30, Secure: s.cfg.SecureCookies, HttpOnly: true, SameSite: http.SameSiteStrictMode,
			})
		}
		c.Set(handlers.CSRFContextKey, csrfToken(key, sessionID))
		c.Response().Header().Add(echo.HeaderVary, echo.HeaderCookie)
		return next(c)
	}
}
