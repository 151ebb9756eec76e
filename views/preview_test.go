package views

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/static"
)

// previewCSP is the Content-Security-Policy the web server sends; the preview
// sends the same so that a browser reports anything the pages would break.
const previewCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

// TestPreview serves every sample page and the static assets for a person (or a
// headless browser) to look at. It only runs when asked:
//
//	STOCKADE_PREVIEW=127.0.0.1:8099 go test ./views -run Preview -timeout 0
//
// Pages are at /preview/<name>, listed at /. STOCKADE_PREVIEW_FOR (a duration,
// default 30m) bounds how long it serves; Ctrl-C stops it earlier.
func TestPreview(t *testing.T) {
	addr := os.Getenv("STOCKADE_PREVIEW")
	if addr == "" {
		t.Skip("set STOCKADE_PREVIEW=host:port to serve the page preview")
	}
	serveFor := 30 * time.Minute
	if s := os.Getenv("STOCKADE_PREVIEW_FOR"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("parse STOCKADE_PREVIEW_FOR: %v", err)
		}
		serveFor = d
	}

	handler := previewHandler(samplePages(), nil)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	t.Logf("preview at http://%s/ for %s", ln.Addr(), serveFor)
	fmt.Fprintf(os.Stderr, "preview at http://%s/\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, serveFor)
	defer cancel()
	go func() {
		<-ctx.Done()
		shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("serve preview: %v", err)
	}
}

// previewHandler serves the sample pages at /preview/<name>, an index at /, and
// static.FS at /static/, all under the production CSP. POSTs are answered with a
// small page (h1#received) and, when onPost is set, reported to it after the
// form has been parsed.
func previewHandler(pages []samplePage, onPost func(*http.Request)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static.FS)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!DOCTYPE html><title>Stockade page preview</title><h1>Page preview</h1><ul>")
		for _, sp := range pages {
			fmt.Fprintf(w, `<li><a href="/preview/%s">%s</a></li>`, sp.Name, sp.Name)
		}
		fmt.Fprint(w, "</ul>")
	})
	for _, sp := range pages {
		mux.HandleFunc("GET /preview/"+sp.Name, func(w http.ResponseWriter, r *http.Request) {
			// Render fully before writing, as the real handlers do.
			var buf bytes.Buffer
			if err := sp.View.Render(r.Context(), &buf); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(buf.Bytes())
		})
	}
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if onPost != nil {
			onPost(r)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!DOCTYPE html><title>Received</title><main id="main"><h1 id="received">Received</h1></main>`)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", previewCSP)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		mux.ServeHTTP(w, r)
	})
}
