// Package clip bounds text for a column, a header or a peer's field: valid
// UTF-8, at most n bytes, cut on a rune boundary and marked with "…" when
// cut (the mark counts toward n, so the bound holds).
package clip

import (
	"strings"
	"unicode/utf8"
)

// Mark ends a cut string.
const Mark = "…"

// String is s as valid UTF-8 (invalid bytes become U+FFFD) of at most n
// bytes, ending in Mark when it was cut.
func String(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	if n < len(Mark) {
		return ""
	}
	cut := n - len(Mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Mark
}
