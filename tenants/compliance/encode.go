package compliance

import (
	"encoding/json"
	"fmt"
	"strings"
)

func encode(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode: %w", err)
	}
	return string(b), nil
}

// stringsToValid makes s storable text: valid UTF-8, no NUL.
func stringsToValid(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}
