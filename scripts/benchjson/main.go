// Command benchjson turns `go test -bench` output into bench-results.json:
// every benchmark's metrics by package, and the ratios (metrics named
// *-ratio: a figure against a baseline measured in the same run) listed
// apart, so a run's targets can be read without the log.
//
//	go test -run '^$' -bench . ./... > bench.log; go run ./scripts/benchjson < bench.log > bench-results.json
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Benchmark is one result line.
type Benchmark struct {
	Package    string             `json:"package"`
	Name       string             `json:"name"`
	Iterations int64              `json:"iterations"`
	Metrics    map[string]float64 `json:"metrics"`
}

// Ratio is one *-ratio metric of a benchmark.
type Ratio struct {
	Benchmark string  `json:"benchmark"`
	Metric    string  `json:"metric"`
	Value     float64 `json:"value"`
}

// Results is the file.
type Results struct {
	Commit     string      `json:"commit,omitempty"`
	Date       string      `json:"date"`
	Failed     []string    `json:"failed"`
	Ratios     []Ratio     `json:"ratios"`
	Benchmarks []Benchmark `json:"benchmarks"`
}

var (
	lineRE = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)
	failRE = regexp.MustCompile(`^(?:FAIL|--- FAIL:)\s+(\S+)`)
)

func parse(r io.Reader) (Results, error) {
	res := Results{Date: time.Now().UTC().Format(time.RFC3339), Failed: []string{}, Ratios: []Ratio{}, Benchmarks: []Benchmark{}}
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = p
			continue
		}
		if m := failRE.FindStringSubmatch(line); m != nil {
			res.Failed = append(res.Failed, m[1])
			continue
		}
		m := lineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.ParseInt(m[2], 10, 64)
		b := Benchmark{Package: pkg, Name: m[1], Iterations: n, Metrics: map[string]float64{}}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			b.Metrics[f[i+1]] = v
			if strings.HasSuffix(f[i+1], "-ratio") {
				res.Ratios = append(res.Ratios, Ratio{Benchmark: b.Name, Metric: f[i+1], Value: v})
			}
		}
		res.Benchmarks = append(res.Benchmarks, b)
	}
	return res, sc.Err()
}

func main() {
	res, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchjson:", err)
		os.Exit(1)
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		res.Commit = strings.TrimSpace(string(out))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "benchjson:", err)
		os.Exit(1)
	}
}
