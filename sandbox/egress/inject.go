package egress

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/stockade-dev/stockade/tenants/secrets"
)

// injector swaps placeholders on one intercepted connection, each secret
// only where its owner allows (secrets.NormalizeInject), and scrubs what
// comes back (scrub.go). It lives as long as the connection, in its
// goroutine.
type injector struct {
	auth    *strings.Replacer            // the Authorization header
	headers map[string]*strings.Replacer // other headers, canonical names
	query   *strings.Replacer
	path    *strings.Replacer
	body    *strings.Replacer
	// static are the patterns every response is scrubbed of; basic, those
	// of the current request's swapped Basic credentials.
	static []pattern
	basic  []pattern
	// authNames: placeholder -> name of the secrets that may go in the
	// Authorization header.
	authNames map[string]string
	// reflected counts the values rewritten in responses, per secret.
	reflected map[string]int64
}

// newInjector builds the replacers of creds (the secrets.Store's
// Credentials for the connection's host).
func newInjector(creds []secrets.Credential) *injector {
	inj := &injector{headers: map[string]*strings.Replacer{}, authNames: map[string]string{}, reflected: map[string]int64{}}
	pairs := map[string][]string{}
	for _, c := range creds {
		for _, loc := range c.Inject {
			v := c.Value
			if loc == secrets.InjectQuery {
				v = url.QueryEscape(v) // it lands in an encoded query
			}
			pairs[loc] = append(pairs[loc], c.Placeholder, v)
			if loc == secrets.InjectAuthorization {
				inj.authNames[c.Placeholder] = c.Name
			}
		}
		inj.static = append(inj.static, secretPatterns(c.Name, c.Value, c.Placeholder)...)
	}
	replacer := func(loc string) *strings.Replacer {
		if len(pairs[loc]) == 0 {
			return nil
		}
		return strings.NewReplacer(pairs[loc]...)
	}
	inj.auth, inj.query, inj.path, inj.body = replacer(secrets.InjectAuthorization), replacer(secrets.InjectQuery),
		replacer(secrets.InjectPath), replacer(secrets.InjectBody)
	for loc := range pairs {
		if name, ok := strings.CutPrefix(loc, secrets.InjectHeaderPrefix); ok {
			inj.headers[name] = replacer(loc)
		}
	}
	return inj
}

// swapRequest replaces placeholders in req where their secrets may go, and
// readies req for a response the gateway can scrub: Accept-Encoding is
// narrowed to what it can decode (gzip or identity), and Range requests
// become whole ones (a value cut in pieces across ranges would pass).
func (inj *injector) swapRequest(req *http.Request) error {
	stripHopHeaders(req.Header)
	inj.basic = inj.basic[:0]
	for k, vs := range req.Header {
		if k == "Authorization" {
			if inj.auth == nil {
				continue
			}
			for i, v := range vs {
				vs[i] = swapAuthorization(v, inj.auth)
				inj.noteBasic(v, vs[i])
			}
			continue
		}
		r := inj.headers[k]
		if r == nil {
			continue
		}
		for i, v := range vs {
			vs[i] = r.Replace(v)
		}
	}
	if inj.query != nil {
		req.URL.RawQuery = inj.query.Replace(req.URL.RawQuery)
	}
	if inj.path != nil {
		if p := inj.path.Replace(req.URL.Path); p != req.URL.Path {
			req.URL.Path, req.URL.RawPath = p, ""
		}
	}
	req.RequestURI = ""
	if acceptsGzip(req.Header.Values("Accept-Encoding")) {
		req.Header.Set("Accept-Encoding", "gzip")
	} else {
		req.Header.Set("Accept-Encoding", "identity")
	}
	req.Header.Del("Range")
	req.Header.Del("If-Range")
	if inj.body != nil && req.Body != nil && req.ContentLength > 0 && req.ContentLength <= maxSwapBody {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxSwapBody+1))
		if err != nil {
			return fmt.Errorf("read request body: %w", err)
		}
		b = []byte(inj.body.Replace(string(b)))
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.ContentLength = int64(len(b))
		req.Header.Set("Content-Length", strconv.Itoa(len(b)))
	}
	return nil
}

// noteBasic remembers the Basic credentials the gateway built from the
// sandbox's: an upstream echoing the Authorization header gets its own
// text back, exactly (the value in it would be hidden by base64).
func (inj *injector) noteBasic(sent, swapped string) {
	if sent == swapped {
		return
	}
	scheme, to, ok := strings.Cut(sent, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return
	}
	_, from, _ := strings.Cut(swapped, " ")
	from, to = strings.TrimSpace(from), strings.TrimSpace(to)
	if from == "" {
		return
	}
	// Name the secret whose placeholder the sandbox put in.
	name := "Authorization"
	if raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(to, "=")); err == nil {
		for ph, n := range inj.authNames {
			if strings.Contains(string(raw), ph) {
				name = n
			}
		}
	}
	inj.basic = append(inj.basic, pattern{from: []byte(from), to: []byte(to), name: name})
}

// acceptsGzip reports whether Accept-Encoding values accept gzip.
func acceptsGzip(vals []string) bool {
	for _, v := range vals {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "x-gzip" {
				continue
			}
			if q, ok := strings.CutPrefix(strings.ReplaceAll(strings.ToLower(params), " ", ""), "q="); ok {
				if f, err := strconv.ParseFloat(q, 64); err == nil && f <= 0 {
					continue // "gzip;q=0": refused
				}
			}
			return true
		}
	}
	return false
}

// swapAuthorization replaces placeholders in an Authorization value,
// inside Basic credentials too: git and most HTTP clients send a token as
// the password of "Basic base64(user:token)", where a plain replace never
// sees it. repl only ever holds the secrets scoped to the request's host
// that may go in this header.
func swapAuthorization(v string, repl *strings.Replacer) string {
	v = repl.Replace(v)
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return v
	}
	cred = strings.TrimSpace(cred)
	enc := base64.StdEncoding
	raw, err := enc.DecodeString(cred)
	if err != nil {
		// Some clients leave the padding out.
		if raw, err = base64.RawStdEncoding.DecodeString(cred); err != nil {
			return v
		}
	}
	swapped := repl.Replace(string(raw))
	if swapped == string(raw) {
		return v
	}
	return scheme + " " + enc.EncodeToString([]byte(swapped))
}

// reflectedNames lists the secrets found in responses, sorted.
func (inj *injector) reflectedNames() []string {
	out := make([]string, 0, len(inj.reflected))
	for n := range inj.reflected {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// reflectedTotal is how many values were rewritten on the connection.
func (inj *injector) reflectedTotal() int64 {
	var n int64
	for _, c := range inj.reflected {
		n += c
	}
	return n
}
