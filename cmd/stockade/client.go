package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
)

// apiClient talks to a Stockade server's JSON API with an API token.
type apiClient struct {
	base  string // no trailing slash
	token string
	http  *http.Client
}

// newAPIClient reads STOCKADE_URL (default http://127.0.0.1:8080, or
// STOCKADE_ADDR's) and STOCKADE_TOKEN.
func newAPIClient(getenv func(string) string) (*apiClient, error) {
	base := getenv("STOCKADE_URL")
	if base == "" {
		addr := getenv("STOCKADE_ADDR")
		if addr == "" {
			addr = "127.0.0.1:8080"
		}
		base = "http://" + addr
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("STOCKADE_URL %q: must be the server's http(s) URL", base)
	}
	token := strings.TrimSpace(getenv("STOCKADE_TOKEN"))
	if token == "" {
		return nil, errors.New("STOCKADE_TOKEN is not set: make an API token on the server's API tokens page (or `stockade token create`)")
	}
	// No overall timeout: exec streams and file copies take as long as they
	// take; connecting and the first byte are bounded by the transport.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 10 * time.Minute
	return &apiClient{base: strings.TrimSuffix(base, "/"), token: token, http: &http.Client{Transport: tr}}, nil
}

// problemError is an error answer of the API (an RFC 9457 problem document).
type problemError api.Problem

func (p *problemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", p.Status, p.Title)
	switch {
	case len(p.Errors) > 0:
		for _, f := range p.Errors {
			fmt.Fprintf(&b, "\n  %s: %s", f.Field, f.Detail)
		}
	case p.Detail != "":
		b.WriteString(": " + p.Detail)
	}
	if p.RequestID != "" && p.Status >= 500 {
		fmt.Fprintf(&b, "\n  (request id %s)", p.RequestID)
	}
	return b.String()
}

// do sends a request (with headers given as name, value pairs) and returns
// the response when it succeeded, or the problem it answered.
func (c *apiClient) do(ctx context.Context, method, path string, body io.Reader, contentType string, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if sr, ok := body.(sizedReader); ok {
		switch {
		case sr.size == 0:
			req.Body, req.ContentLength = http.NoBody, 0
		case sr.size > 0:
			req.ContentLength = sr.size
		}
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, c.base+path, err)
	}
	if resp.StatusCode < 400 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	p := &problemError{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
	if err := json.Unmarshal(b, p); err != nil || p.Status == 0 {
		p = &problemError{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), Detail: strings.TrimSpace(string(b))}
	}
	return nil, p
}

// json sends in (nil: no body) and decodes the answer into out (nil: ignore it).
func (c *apiClient) json(ctx context.Context, method, path string, in, out any, hdr ...string) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, body, ct, hdr...)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// subcommand checks that a command of the API client names a subcommand
// and makes the client; a missing one prints the usage.
func subcommand(args []string, getenv func(string) string, stderr io.Writer) (*apiClient, error) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return nil, exitError(2)
	}
	return newAPIClient(getenv)
}

// showJSON prints the indented JSON of GET path+ID for `stockade NOUN show
// ID` (args is the subcommand and its arguments).
func showJSON(ctx context.Context, c *apiClient, args []string, noun, path string, stdout, stderr io.Writer) error {
	if len(args) != 2 {
		fmt.Fprintf(stderr, "usage: stockade %s show ID\n", noun)
		return exitError(2)
	}
	var out json.RawMessage
	if err := c.json(ctx, "GET", path+url.PathEscape(args[1]), nil, &out); err != nil {
		return err
	}
	return writeIndented(stdout, out)
}

// readEvents reads a stream of newline-delimited JSON events of command
// output (exec's and a process's), decoding each one's data (text, or
// base64 for bytes that are not) before fn sees it. fn answers true once
// the stream's last event came; readEvents answers whether one did, and
// the stream's or fn's error, named by op.
func readEvents[E any](r io.Reader, op string, payload func(*E) (text, b64 string), fn func(ev *E, data []byte) (bool, error)) (bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var ev E
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return false, fmt.Errorf("%s: bad event from the server: %w", op, err)
		}
		text, b64 := payload(&ev)
		data := []byte(text)
		if b64 != "" {
			var err error
			if data, err = base64.StdEncoding.DecodeString(b64); err != nil {
				return false, fmt.Errorf("%s: bad output from the server: %w", op, err)
			}
		}
		if done, err := fn(&ev, data); done || err != nil {
			return done, err
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	return false, nil
}
