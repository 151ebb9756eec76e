package image

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestStripELF(t *testing.T) {
	needTool(t, "go")
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	prog := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"stripped ok\") }\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(name string, ldflags string) []byte {
		t.Helper()
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, src)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v: %s", err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	full, small := build("full", ""), build("small", "-s -w")

	got, err := stripELF(full)
	if err != nil {
		t.Fatalf("stripELF(full) = %v", err)
	}
	if len(got) >= len(full) || len(got) > len(small)+4096 {
		t.Errorf("Got(len(stripELF(full))) = %d; want below %d and about %d (-s -w)", len(got), len(full), len(small))
	}
	f, err := elf.NewFile(bytes.NewReader(got))
	if err != nil {
		t.Fatalf("elf.NewFile(stripped) = %v", err)
	}
	for _, name := range []string{".symtab", ".strtab", ".debug_info"} {
		if f.Section(name) != nil {
			t.Errorf("Got(section %s) present; want dropped", name)
		}
	}
	for _, name := range []string{".text", ".rodata", ".gopclntab", ".go.buildinfo", ".data", ".bss"} {
		if f.Section(name) == nil {
			t.Errorf("Got(section %s) missing; want kept", name)
		}
	}
	if _, err := buildinfo.Read(bytes.NewReader(got)); err != nil {
		t.Errorf("Got(buildinfo.Read(stripped)) = %v; want the build info", err)
	}
	// It still runs.
	exe := filepath.Join(dir, "stripped")
	if err := os.WriteFile(exe, got, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(exe).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "stripped ok" {
		t.Errorf("Got(run stripped) = %q, %v; want \"stripped ok\"", out, err)
	}

	// Nothing left to drop: the same bytes back.
	for name, in := range map[string][]byte{"stripped": got, "-s -w": small} {
		again, err := stripELF(in)
		if err != nil || !bytes.Equal(again, in) {
			t.Errorf("Got(stripELF(%s)) = %d bytes, %v; want the same %d bytes", name, len(again), err, len(in))
		}
	}
	for name, in := range map[string][]byte{"not elf": []byte("#!/bin/sh\n"), "truncated": full[:200]} {
		if _, err := stripELF(in); err == nil {
			t.Errorf("Got(stripELF(%s)) = nil error; want an error", name)
		}
	}
}
