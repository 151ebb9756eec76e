package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestConfigMaxFileBytes(t *testing.T) {
	tests := []struct {
		name  string
		env   string
		flags []string
		want  int64 // 0: check must refuse, naming the variable
	}{
		{"default 64 MiB", "", nil, 64 << 20},
		{"from the environment", "1048576", nil, 1 << 20},
		{"the flag wins", "1048576", []string{"-max-file-bytes", "2048"}, 2048},
		{"the agent's bound", "268435456", nil, 256 << 20},
		{"over the agent's bound", "268435457", nil, 0},
		{"zero", "0", nil, 0},
		{"not a number", "64MiB", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"STOCKADE_DATA_DIR": t.TempDir(), "STOCKADE_MAX_FILE_BYTES": tc.env}
			var c config
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.flags(fs, func(k string) string { return env[k] })
			if err := fs.Parse(tc.flags); err != nil {
				t.Fatal(err)
			}
			err := c.check()
			if tc.want == 0 {
				if err == nil || !strings.Contains(err.Error(), "STOCKADE_MAX_FILE_BYTES") {
					t.Errorf("Got(check()) = %v; want an error naming STOCKADE_MAX_FILE_BYTES", err)
				}
				return
			}
			if err != nil || c.MaxFileBytes != tc.want {
				t.Errorf("Got(check()) = %v, MaxFileBytes %d; want nil, %d", err, c.MaxFileBytes, tc.want)
			}
		})
	}
}
