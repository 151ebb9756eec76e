package mcp_test

import (
	"testing"
)

// TestMCPFiles: through /mcp a folder is made, listed, a file moved and
// removed; another tenant's token gets not-found; bad input names the
// field (a path climbing out, the root, a folder not empty).
func TestMCPFiles(t *testing.T) {
	v := newVMEnv(t, "mcp-files")
	a, b := v.a, v.b
	var sb struct{ ID string }
	decode(t, "create_sandbox", call(t, a, "create_sandbox", map[string]any{"template": "busybox", "memory_mib": 128}), &sb)

	var made struct {
		Entry struct {
			Path, Type, Mode string
		} `json:"entry"`
		Created bool `json:"created"`
	}
	decode(t, "make_dir", call(t, a, "make_dir", map[string]any{"sandbox_id": sb.ID, "path": "src/pkg", "mode": "0750"}), &made)
	if !made.Created || made.Entry.Path != "/workspace/src/pkg" || made.Entry.Type != "dir" || made.Entry.Mode != "0750" {
		t.Errorf("Got(make_dir) = %+v; want /workspace/src/pkg made, 0750", made)
	}
	decode(t, "write_file", call(t, a, "write_file", map[string]any{"sandbox_id": sb.ID, "path": "src/pkg/a.txt", "content": "abc"}), &struct{}{})

	type entry struct {
		Path string `json:"path"`
		Type string `json:"type"`
		Size int64  `json:"size"`
	}
	var list struct{ Entries []entry }
	decode(t, "list_files", call(t, a, "list_files", map[string]any{"sandbox_id": sb.ID, "path": "src", "depth": 2}), &list)
	want := []entry{{"/workspace/src/pkg", "dir", list.Entries[0].Size}, {"/workspace/src/pkg/a.txt", "file", 3}}
	if len(list.Entries) != 2 || list.Entries[0] != want[0] || list.Entries[1] != want[1] {
		t.Errorf("Got(list_files src depth 2) = %+v; want %+v", list.Entries, want)
	}

	var moved entry
	decode(t, "move_file", call(t, a, "move_file", map[string]any{"sandbox_id": sb.ID, "source": "src/pkg/a.txt", "destination": "/workspace/b.txt"}), &moved)
	if moved.Path != "/workspace/b.txt" || moved.Size != 3 {
		t.Errorf("Got(move_file) = %+v; want /workspace/b.txt, 3 bytes", moved)
	}
	wantToolError(t, "read the moved-away file", call(t, a, "read_file", map[string]any{"sandbox_id": sb.ID, "path": "src/pkg/a.txt"}), "not-found: path: ")

	// Another tenant's token: not found; nothing changes.
	wantOthersNotFound(t, b, sb.ID, map[string]map[string]any{
		"list_files":  {"path": "/"},
		"make_dir":    {"path": "pwned"},
		"move_file":   {"source": "b.txt", "destination": "c.txt"},
		"remove_file": {"path": "b.txt"},
	})
	// Bad input names the field.
	wantToolError(t, "list climbing out", call(t, a, "list_files", map[string]any{"sandbox_id": sb.ID, "path": "../.."}), "invalid: path: ")
	wantToolError(t, "remove the root", call(t, a, "remove_file", map[string]any{"sandbox_id": sb.ID, "path": "/"}), "invalid: path: ")
	wantToolError(t, "move from outside", call(t, a, "move_file", map[string]any{"sandbox_id": sb.ID, "source": "../x", "destination": "y"}), "invalid: source: ")
	wantToolError(t, "remove a full folder", call(t, a, "remove_file", map[string]any{"sandbox_id": sb.ID, "path": "src"}), "conflict: ")
	wantToolError(t, "bad depth", call(t, a, "list_files", map[string]any{"sandbox_id": sb.ID, "path": "src", "depth": 99}), "invalid: depth: ")

	decode(t, "remove_file", call(t, a, "remove_file", map[string]any{"sandbox_id": sb.ID, "path": "src", "recursive": true}), &struct{}{})
	decode(t, "list_files", call(t, a, "list_files", map[string]any{"sandbox_id": sb.ID, "path": "/workspace"}), &list)
	if len(list.Entries) != 1 || list.Entries[0].Path != "/workspace/b.txt" {
		t.Errorf("Got(list_files /workspace after remove) = %+v; want only b.txt", list.Entries)
	}
	decode(t, "destroy_sandbox", call(t, a, "destroy_sandbox", map[string]any{"sandbox_id": sb.ID}), &sb)
}
