package agentproto_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

func TestPermString(t *testing.T) {
	tests := []struct {
		mode uint32
		want string
	}{
		{0o100644, "-rw-r--r--"},
		{0o040755, "drwxr-xr-x"},
		{0o120777, "Lrwxrwxrwx"},
		{0o104755, "urwxr-xr-x"},
		{0o041777, "dtrwxrwxrwx"},
		{0o010600, "prw-------"},
	}
	for _, tc := range tests {
		if got := agentproto.PermString(tc.mode); got != tc.want {
			t.Errorf("Got(PermString(%o)) = %q; want %q", tc.mode, got, tc.want)
		}
	}
}

// TestCheckFsEntry: what the host accepts of the entries a guest reports.
func TestCheckFsEntry(t *testing.T) {
	good := agentproto.FsEntry{Name: "a.txt", Type: agentproto.FsFile, Path: "/workspace/a.txt", Size: 1, Mode: 0o644,
		Permissions: "-rw-r--r--", Owner: "sandbox", Group: "sandbox"}
	tests := []struct {
		name string
		edit func(e *agentproto.FsEntry)
		ok   bool
	}{
		{"good", func(e *agentproto.FsEntry) {}, true},
		{"root", func(e *agentproto.FsEntry) { e.Path, e.Name, e.Type = "/", "/", agentproto.FsDir }, true},
		{"symlink", func(e *agentproto.FsEntry) { e.Type, e.SymlinkTarget = agentproto.FsSymlink, "/etc" }, true},
		{"unknown type", func(e *agentproto.FsEntry) { e.Type = "socket" }, false},
		{"relative path", func(e *agentproto.FsEntry) { e.Path = "workspace/a.txt" }, false},
		{"unclean path", func(e *agentproto.FsEntry) { e.Path, e.Name = "/workspace/../etc/a.txt", "a.txt" }, false},
		{"name not the path's", func(e *agentproto.FsEntry) { e.Name = "b.txt" }, false},
		{"long name", func(e *agentproto.FsEntry) { e.Name = strings.Repeat("n", 256); e.Path = "/" + e.Name }, false},
		{"long path", func(e *agentproto.FsEntry) { e.Path = strings.Repeat("/d", 2100) + "/a.txt" }, false},
		{"negative size", func(e *agentproto.FsEntry) { e.Size = -1 }, false},
		{"mode with type bits", func(e *agentproto.FsEntry) { e.Mode = 0o100644 }, false},
		{"owner with a newline", func(e *agentproto.FsEntry) { e.Owner = "root\nx" }, false},
		{"long group", func(e *agentproto.FsEntry) { e.Group = strings.Repeat("g", 65) }, false},
		{"target on a file", func(e *agentproto.FsEntry) { e.SymlinkTarget = "/etc" }, false},
		{"NUL in target", func(e *agentproto.FsEntry) { e.Type, e.SymlinkTarget = agentproto.FsSymlink, "a\x00b" }, false},
	}
	for _, tc := range tests {
		e := good
		tc.edit(&e)
		err := agentproto.CheckFsEntry(e)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, agentproto.ErrProtocol)) {
			t.Errorf("Got(CheckFsEntry(%s)) = %v; want ok %v (else ErrProtocol)", tc.name, err, tc.ok)
		}
	}
}

func TestCheckFsEvent(t *testing.T) {
	tests := []struct {
		ev agentproto.FsEvent
		ok bool
	}{
		{agentproto.FsEvent{Name: "a/b", Type: agentproto.FsEventCreate}, true},
		{agentproto.FsEvent{Type: agentproto.FsEventOverflow, Dropped: 3}, true},
		{agentproto.FsEvent{Name: "../a", Type: agentproto.FsEventCreate}, false},
		{agentproto.FsEvent{Name: "/a", Type: agentproto.FsEventWrite}, false},
		{agentproto.FsEvent{Name: "a/./b", Type: agentproto.FsEventWrite}, false},
		{agentproto.FsEvent{Name: "", Type: agentproto.FsEventRemove}, false},
		{agentproto.FsEvent{Name: "x", Type: agentproto.FsEventOverflow}, false},
		{agentproto.FsEvent{Name: "x", Type: "mystery"}, false},
	}
	for _, tc := range tests {
		if err := agentproto.CheckFsEvent(tc.ev); (err == nil) != tc.ok {
			t.Errorf("Got(CheckFsEvent(%+v)) = %v; want ok %v", tc.ev, err, tc.ok)
		}
	}
}
