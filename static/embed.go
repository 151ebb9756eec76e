// Package static holds the browser assets (CSS, JavaScript, images and the
// vendored htmx and xterm.js) embedded into the binary, so a deployment is one
// file and a build needs no npm. scripts/assets.sh refreshes vendor/.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
)

// FS is served at /static/: static.FS's css/app.css is /static/css/app.css.
//
//go:embed css js img vendor
var FS embed.FS

// Version returns a short hash of every embedded file's path and content. Pages
// append it to asset URLs (?v=) so that assets can be cached for a long time
// yet change the moment a new build ships different bytes. It reads the whole
// FS, so compute it once at startup.
func Version() (string, error) {
	return hashFS(FS)
}

func hashFS(fsys fs.FS) (string, error) {
	h := sha256.New()
	// WalkDir visits in lexical order, so the hash does not depend on the OS.
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := fsys.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		// The path is length-prefixed so that no two file sets hash alike by
		// shifting bytes between a name and a body.
		fmt.Fprintf(h, "%d:%s\n", len(path), path)
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "\n%d\n", n)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash static assets: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}
