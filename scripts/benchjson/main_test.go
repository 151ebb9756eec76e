package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	log := `goos: linux
pkg: github.com/stockade-dev/stockade/sandbox
BenchmarkSandboxExecTrue-2   	       1	 123456 ns/op	        32.90 p50-ms	         0.1300 p50-ratio
--- FAIL: BenchmarkBroken
pkg: github.com/stockade-dev/stockade/handlers/e2b
BenchmarkE2B/commands.run-true-2 	       1	 5 ns/op	 1.10 p50-ratio	 257.0 p50-ms
FAIL	github.com/stockade-dev/stockade/handlers/e2b	12.3s
`
	res, err := parse(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Benchmarks) != 2 || res.Benchmarks[0].Package != "github.com/stockade-dev/stockade/sandbox" ||
		res.Benchmarks[0].Name != "BenchmarkSandboxExecTrue" || res.Benchmarks[0].Metrics["p50-ms"] != 32.9 {
		t.Errorf("Got(benchmarks) = %+v; want two, the first in sandbox with p50-ms 32.9", res.Benchmarks)
	}
	if b := res.Benchmarks[1]; b.Name != "BenchmarkE2B/commands.run-true" || b.Package != "github.com/stockade-dev/stockade/handlers/e2b" {
		t.Errorf("Got(second) = %+v; want BenchmarkE2B/commands.run-true in handlers/e2b", b)
	}
	if len(res.Ratios) != 2 || res.Ratios[0].Value != 0.13 || res.Ratios[1].Value != 1.10 {
		t.Errorf("Got(ratios) = %+v; want 0.13 and 1.10", res.Ratios)
	}
	if len(res.Failed) != 2 {
		t.Errorf("Got(failed) = %v; want the failed benchmark and package", res.Failed)
	}
}
