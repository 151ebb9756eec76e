package image

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func needTool(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed: %v", n, err)
			}
			t.Skipf("%s is not installed: %v", n, err)
		}
	}
}

func TestCPIOArchive(t *testing.T) {
	needTool(t, "cpio")
	a := newCPIOArchive()
	steps := []error{
		a.file("init", 0o755, []byte("#!agent")),
		a.file("lib/modules/6.1/kernel/a.ko", 0o644, []byte("odd-length")),
		a.symlink("bin/sh", "busybox"),
		a.dir("tmp", 0o777|os.ModeSticky),
		a.add(cpioEntry{Name: "dev/console", Mode: 0o600, Char: true, Major: 5, Minor: 1}),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("add #%d = %v", i, err)
		}
	}
	if err := a.file("init", 0o755, nil); err == nil {
		t.Errorf("Got(adding init twice) = nil; want an error")
	}
	if err := a.file("init/x", 0o755, nil); err == nil {
		t.Errorf("Got(adding under a file) = nil; want an error")
	}
	var buf bytes.Buffer
	n, err := a.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo() = %v", err)
	}
	if n != int64(buf.Len()) || n%4 != 0 {
		t.Errorf("Got(WriteTo() count) = %d (buffer %d); want equal and 4-aligned", n, buf.Len())
	}
	var again bytes.Buffer
	a.WriteTo(&again)
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("Got(two writes) differ; want the same bytes")
	}

	// GNU cpio reads it back: the kernel reads the same format.
	cmd := exec.Command("cpio", "-t", "-v", "--quiet")
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -t = %v", err)
	}
	listing := string(out)
	for _, want := range []string{
		`(?m)^-rwxr-xr-x .* 7 .* init$`,
		`(?m)^lrwxrwxrwx .* bin/sh -> busybox$`,
		`(?m)^drwxrwxrwt .* tmp$`,
		`(?m)^crw------- .* 5,\s+1 .* dev/console$`,
		`(?m)^drwxr-xr-x .* lib/modules/6.1/kernel$`,
		`(?m)^-rw-r--r-- .* 10 .* lib/modules/6.1/kernel/a.ko$`,
	} {
		if !regexp.MustCompile(want).MatchString(listing) {
			t.Errorf("Got(cpio listing) = %s; want a line matching %s", listing, want)
		}
	}
	// Parents come before children.
	names := strings.Fields(strings.Join(regexp.MustCompile(`(?m)\S+$`).FindAllString(listing, -1), " "))
	if i, j := slices.Index(names, "lib"), slices.Index(names, "lib/modules/6.1/kernel/a.ko"); i < 0 || j < 0 || i > j {
		t.Errorf("Got(order) = %v; want lib before its files", names)
	}

	dir := t.TempDir()
	cmd = exec.Command("cpio", "-i", "-d", "--quiet")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i = %v: %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "lib/modules/6.1/kernel/a.ko")); err != nil || string(b) != "odd-length" {
		t.Errorf("Got(extracted a.ko) = %q, %v; want %q", b, err, "odd-length")
	}
}

func TestParseLdd(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    []string
		wantErr bool
	}{
		{"crun", "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n",
			[]string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}, false},
		{"missing library", "\tlibfoo.so.1 => not found\n", nil, true},
		{"static", "\tnot a dynamic executable\n", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			libs, err := parseLdd([]byte(tc.out))
			if (err != nil) != tc.wantErr {
				t.Fatalf("Got(parseLdd() error) = %v; want error %v", err, tc.wantErr)
			}
			var got []string
			for _, l := range libs {
				got = append(got, l.Path)
				if _, err := os.Stat(l.Host); err != nil {
					t.Errorf("Got(host file %s) = %v; want it to exist", l.Host, err)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Got(parseLdd()) = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestParseControl(t *testing.T) {
	in := "Package: linux-image-amd64\nSource: linux-signed-amd64 (6.1.192+3)\nVersion: 6.1.192-3\n" +
		"Depends: linux-image-6.1.0-57-amd64 (= 6.1.192-3)\nFilename: pool/main/l/linux-image-amd64_6.1.192-3_amd64.deb\n" +
		"SHA256: abc\nDescription: Linux for\n 64-bit PCs\n\n" +
		"Package: crun\nVersion: 1.8.1-1+deb12u1\nFilename: pool/main/c/crun/crun_1.8.1-1+deb12u1_amd64.deb\nSHA256: def\n"
	pkgs := parseControl([]byte(in))
	if len(pkgs) != 2 {
		t.Fatalf("Got(len(parseControl())) = %d; want 2", len(pkgs))
	}
	if pkgs[0].Name != "linux-image-amd64" || pkgs[0].Version != "6.1.192-3" || pkgs[0].SHA256 != "abc" {
		t.Errorf("Got(parseControl()[0]) = %+v; want linux-image-amd64 6.1.192-3 abc", pkgs[0])
	}
	if pkgs[1].String() != "crun=1.8.1-1+deb12u1" {
		t.Errorf("Got(parseControl()[1].String()) = %q; want %q", pkgs[1].String(), "crun=1.8.1-1+deb12u1")
	}
	name, err := kernelDependency(pkgs[0])
	if err != nil || name != "linux-image-6.1.0-57-amd64" {
		t.Errorf("Got(kernelDependency()) = %q, %v; want linux-image-6.1.0-57-amd64", name, err)
	}
	if _, err := kernelDependency(pkgs[1]); err == nil {
		t.Errorf("Got(kernelDependency(crun)) = nil error; want an error")
	}
}

func TestMirrors(t *testing.T) {
	deb822 := "Types: deb\n# comment\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n" +
		"Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\nComponents: main\n"
	if got := mirrorDeb822(deb822, "bookworm"); got != "http://deb.example/debian" {
		t.Errorf("Got(mirrorDeb822(bookworm)) = %q; want http://deb.example/debian", got)
	}
	if got := mirrorDeb822(deb822, "trixie"); got != "" {
		t.Errorf("Got(mirrorDeb822(trixie)) = %q; want empty", got)
	}
	if got := mirrorDeb822("Types: deb\nEnabled: no\nURIs: http://x\nSuites: bookworm\nComponents: main\n", "bookworm"); got != "" {
		t.Errorf("Got(mirrorDeb822(disabled)) = %q; want empty", got)
	}
	list := "# deb http://old bookworm main\ndeb-src http://src bookworm main\n" +
		"deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n"
	if got := mirrorOneLine(list, "bookworm"); got != "http://mirror.example/debian" {
		t.Errorf("Got(mirrorOneLine()) = %q; want http://mirror.example/debian", got)
	}
}

func TestVersionOf(t *testing.T) {
	a := versionOf(map[string]string{"kernel": "1", "agent": "x"})
	if b := versionOf(map[string]string{"agent": "x", "kernel": "1"}); a != b {
		t.Errorf("Got(versionOf in other order) = %s; want %s", b, a)
	}
	if c := versionOf(map[string]string{"kernel": "1", "agent": "y"}); c == a {
		t.Errorf("Got(versionOf(changed input)) = %s; want a new version", c)
	}
	if len(a) != 12 {
		t.Errorf("Got(len(versionOf())) = %d; want 12", len(a))
	}
	if u := uuidOf(a); !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-8[0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(u) {
		t.Errorf("Got(uuidOf()) = %q; want a UUID", u)
	}
}

func TestExtractVmlinux(t *testing.T) {
	needTool(t, "xz")
	elfBytes, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	xz := exec.Command("xz", "--stdout", "--format=xz", "-0")
	xz.Stdin = bytes.NewReader(elfBytes)
	payload, err := xz.Output()
	if err != nil {
		t.Fatal(err)
	}
	// A decoy magic before the real stream and trailing bytes after it, as in a bzImage.
	img := append([]byte("MZ setup code "), []byte(xzMagic)...)
	img = append(img, []byte("not a stream")...)
	img = append(img, payload...)
	img = append(img, []byte{1, 2, 3, 4}...)
	dir := t.TempDir()
	in := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(in, img, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "vmlinux")
	if err := extractVmlinux(context.Background(), in, out); err != nil {
		t.Fatalf("extractVmlinux() = %v", err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, elfBytes) {
		t.Errorf("Got(vmlinux) = %d bytes; want the %d-byte ELF", len(got), len(elfBytes))
	}
	if err := os.WriteFile(in, []byte("no stream here"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := extractVmlinux(context.Background(), in, out); err == nil {
		t.Errorf("Got(extractVmlinux(no stream)) = nil; want an error")
	}
}

func TestCheckStatic(t *testing.T) {
	needTool(t, "go")
	dir := t.TempDir()
	static := filepath.Join(dir, "static")
	cmd := exec.Command("go", "build", "-o", static, "github.com/stockade-dev/stockade/cmd/stockade-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build agent: %v: %s", err, out)
	}
	if err := checkStatic(static); err != nil {
		t.Errorf("Got(checkStatic(agent)) = %v; want nil", err)
	}
	if err := checkStatic("/bin/sh"); err == nil {
		t.Errorf("Got(checkStatic(/bin/sh)) = nil; want dynamically linked error")
	}
	if err := checkStatic(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Got(checkStatic(missing)) = %v; want os.ErrNotExist", err)
	}
}

func TestLoadAndVerifyDetectChanges(t *testing.T) {
	dataDir := t.TempDir()
	if _, err := Load(dataDir); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Got(Load(empty)) = %v; want ErrNotBuilt", err)
	}
	if err := os.MkdirAll(imagesDir(dataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	kernel := filepath.Join(dataDir, "vmlinux")
	if err := os.WriteFile(kernel, []byte("kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := stamp(kernel)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{
		Guest:     Guest{Kernel: kernel},
		Checksums: map[string]string{kernel: bytesSHA256([]byte("kernel"))},
		Files:     map[string]FileStamp{kernel: s},
	}
	if err := writeJSON(manifestPath(dataDir), m); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dataDir); err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if err := Verify(m); err != nil {
		t.Fatalf("Verify() = %v", err)
	}

	// Same size, same time, other bytes: only Verify sees it.
	if err := os.WriteFile(kernel, []byte("KERNEL"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(kernel, s.ModTime, s.ModTime)
	if _, err := Load(dataDir); err != nil {
		t.Errorf("Got(Load(same stamp)) = %v; want nil", err)
	}
	if err := Verify(m); !errors.Is(err, ErrChanged) {
		t.Errorf("Got(Verify(changed bytes)) = %v; want ErrChanged", err)
	}
	os.Chtimes(kernel, time.Now(), time.Now().Add(time.Hour))
	if _, err := Load(dataDir); !errors.Is(err, ErrChanged) {
		t.Errorf("Got(Load(new mtime)) = %v; want ErrChanged", err)
	}
	os.Remove(kernel)
	if _, err := Load(dataDir); !errors.Is(err, ErrChanged) {
		t.Errorf("Got(Load(missing file)) = %v; want ErrChanged", err)
	}
	if err := Verify(m); !errors.Is(err, ErrChanged) {
		t.Errorf("Got(Verify(missing file)) = %v; want ErrChanged", err)
	}
}
