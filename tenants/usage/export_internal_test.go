package usage

import (
	"encoding/json"
	"testing"
)

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `quote " and \ backslash`, "tab\tnew\nline\x00nul\x1f", "ünïcødé ✓", "<script>&"} {
		var got string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil || got != s {
			t.Errorf("Got(appendJSONString(%q)) decodes to %q, %v; want the same string", s, got, err)
		}
	}
}
