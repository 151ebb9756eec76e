package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/vmpool"
)

// TestConfigHostFiles: STOCKADE_HOST_FILES names each host's files mode and
// STOCKADE_HOST_POOL_DIR the pool folder on remote hosts; bad values are
// refused naming the variable.
func TestConfigHostFiles(t *testing.T) {
	tests := []struct {
		name        string
		files, pool string
		bad         string // the variable check must name; "" when valid
		want        map[string]vmpool.FilesMode
	}{
		{name: "defaults", want: map[string]vmpool.FilesMode{}},
		{name: "a mode per host", files: "qemu+tcp://b:16509/system=local,qemu:///system=remote", pool: "/srv/stockade",
			want: map[string]vmpool.FilesMode{"qemu+tcp://b:16509/system": vmpool.FilesLocal, "qemu:///system": vmpool.FilesRemote}},
		{name: "unknown mode", files: "qemu:///system=nfs", bad: "STOCKADE_HOST_FILES"},
		{name: "no mode", files: "qemu:///system", bad: "STOCKADE_HOST_FILES"},
		{name: "relative pool folder", pool: "var/pool", bad: "STOCKADE_HOST_POOL_DIR"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"STOCKADE_DATA_DIR": t.TempDir(), "STOCKADE_HOST_FILES": tc.files, "STOCKADE_HOST_POOL_DIR": tc.pool}
			var c config
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.flags(fs, func(k string) string { return env[k] })
			if err := fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			err := c.check()
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Errorf("Got(check()) = %v; want an error naming %s", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatalf("Got(check()) = %v; want nil", err)
			}
			got, err := vmpool.ParseFilesModes("STOCKADE_HOST_FILES", c.HostFiles)
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("Got(modes) = %v, %v; want %v", got, err, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("Got(mode of %s) = %s; want %s", k, got[k], v)
				}
			}
			if c.HostPoolDir != tc.pool {
				t.Errorf("Got(HostPoolDir) = %q; want %q", c.HostPoolDir, tc.pool)
			}
		})
	}
}
