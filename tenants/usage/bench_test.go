package usage_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/benchrec"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// benchLedger fills a SQLite ledger with realistic rows: sandboxes of 50
// tenants (a few big ones, a long tail) living 1-8 hours each, about a
// hundred starting every hour, each row with allocation, CPU, I/O and now
// and then egress. Rows are added in batches of multi-row INSERTs inside
// one transaction, so a million take seconds, not hours.
type benchLedger struct {
	db      *gorm.DB
	tenants []string
	base    time.Time
	rows    int // rows so far
	sandbox int // sandboxes so far
	rng     *rand.Rand
}

const benchBatch = 32 // rows per INSERT: the driver binds parameters in O(n²), so batches stay small

func newBenchLedger(b *testing.B) *benchLedger {
	b.Helper()
	db := dbtest.SQLite(b)
	ctx := context.Background()
	ts := tenants.NewStore(db, nil)
	l := &benchLedger{db: db, base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), rng: rand.New(rand.NewPCG(7, 11))}
	for i := range 50 {
		tn, err := ts.CreateTenant(ctx, metricsActor, fmt.Sprintf("bench-%02d", i), "")
		if err != nil {
			b.Fatal(err)
		}
		l.tenants = append(l.tenants, tn.ID)
	}
	return l
}

// grow adds rows until the ledger holds n.
func (l *benchLedger) grow(b *testing.B, n int) {
	b.Helper()
	sqlDB, err := l.db.DB()
	if err != nil {
		b.Fatal(err)
	}
	// The secondary indexes are dropped during the fill and made again
	// after it: one sort instead of a million random index updates.
	for _, q := range []string{"DROP INDEX usage_ledger_tenant", "DROP INDEX usage_ledger_period"} {
		if _, err := sqlDB.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	tx, err := sqlDB.Begin()
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("PRAGMA cache_size = -262144"); err != nil { // 256 MiB of page cache for the fill
		b.Fatal(err)
	}
	const cols = "(sandbox_id, period_start, tenant_id, template, user_id, alloc_vcpu_ms, alloc_mib_ms, wall_ms, cpu_ns, " +
		"egress_up_bytes, egress_down_bytes, io_read_bytes, io_write_bytes, memory_peak_bytes)"
	one := "(" + strings.TrimSuffix(strings.Repeat("?,", 14), ",") + ")"
	full := "INSERT INTO usage_ledger " + cols + " VALUES " + strings.TrimSuffix(strings.Repeat(one+",", benchBatch), ",")
	stmt, err := tx.Prepare(full)
	if err != nil {
		b.Fatal(err)
	}
	defer stmt.Close()
	args := make([]any, 0, benchBatch*14)
	templates := []string{"debian", "busybox", "python", "node"}
	flush := func(last bool) {
		if len(args) == 0 {
			return
		}
		if len(args) == benchBatch*14 {
			if _, err := stmt.Exec(args...); err != nil {
				b.Fatal(err)
			}
		} else if last {
			q := "INSERT INTO usage_ledger " + cols + " VALUES " + strings.TrimSuffix(strings.Repeat(one+",", len(args)/14), ",")
			if _, err := tx.Exec(q, args...); err != nil {
				b.Fatal(err)
			}
		} else {
			return
		}
		args = args[:0]
	}
	for l.rows < n {
		s := l.sandbox
		l.sandbox++
		// Skewed over tenants: low indexes are the big customers.
		tenant := l.tenants[min(int(l.rng.ExpFloat64()*8), len(l.tenants)-1)]
		start := l.base.Add(time.Duration(s/100) * time.Hour)
		vcpus, mem := int64(1+l.rng.IntN(4)), int64(256<<l.rng.IntN(4))
		id := fmt.Sprintf("sbx-%08d", s)
		user := fmt.Sprintf("user-%03d", l.rng.IntN(300))
		tpl := templates[l.rng.IntN(len(templates))]
		for h := range 1 + l.rng.IntN(8) {
			if l.rows >= n {
				break
			}
			wall := int64(3_600_000)
			if h == 0 {
				wall = int64(l.rng.IntN(3_600_000) + 1)
			}
			var up, down int64
			if l.rng.IntN(4) == 0 {
				up, down = int64(l.rng.IntN(1<<20)), int64(l.rng.IntN(64<<20))
			}
			args = append(args, id, start.Add(time.Duration(h)*time.Hour), tenant, tpl, user, wall*vcpus, wall*mem, wall,
				int64(l.rng.Float64()*float64(wall*vcpus)*1e6), up, down, int64(l.rng.IntN(1<<24)), int64(l.rng.IntN(1<<24)), mem<<20)
			l.rows++
			flush(false)
		}
	}
	flush(true)
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{"CREATE INDEX usage_ledger_tenant ON usage_ledger (tenant_id, period_start)",
		"CREATE INDEX usage_ledger_period ON usage_ledger (period_start)", "ANALYZE usage_ledger"} {
		if _, err := sqlDB.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
}

// all is a range holding every row.
func (l *benchLedger) all() usage.Range {
	return usage.Range{From: l.base, To: l.base.Add(time.Duration(l.sandbox/100+10) * time.Hour)}
}

// peakHeap runs fn while sampling the heap every 2 ms, after a GC, and
// returns the highest HeapInuse and HeapAlloc above what they were before.
func peakHeap(fn func()) (inuse, alloc uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseInuse, baseAlloc := ms.HeapInuse, ms.HeapAlloc
	var peakInuse, peakAlloc uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peakInuse, peakAlloc = max(peakInuse, m.HeapInuse), max(peakAlloc, m.HeapAlloc)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return sub(peakInuse, baseInuse), sub(peakAlloc, baseAlloc)
}

// benchFigures are one size's measurements.
type benchFigures struct {
	rows                     int
	scanPerSec               float64
	exportPerSec             map[string]float64 // format -> ledger rows per second
	exportRows               map[string]int64   // format -> export rows written
	peakInuse, peakAlloc     map[string]uint64
	scanPeakInuse, scanAlloc uint64
}

// scan reads every ledger row of r with a plain SELECT, in the export's
// order, into typed variables: the floor an export cannot beat.
func scan(b *testing.B, db *gorm.DB, r usage.Range) int {
	sqlDB, err := db.DB()
	if err != nil {
		b.Fatal(err)
	}
	rows, err := sqlDB.Query("SELECT sandbox_id, period_start, tenant_id, template, user_id, alloc_vcpu_ms, alloc_mib_ms, wall_ms, cpu_ns, "+
		"egress_up_bytes, egress_down_bytes, io_read_bytes, io_write_bytes, memory_peak_bytes FROM usage_ledger "+
		"WHERE period_start >= ? AND period_start < ? ORDER BY period_start, tenant_id, sandbox_id", r.From, r.To)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	n := 0
	var (
		sb, tn, tpl, user                  string
		at                                 time.Time
		a, m, w, c, up, down, rd, wr, peak int64
	)
	for rows.Next() {
		if err := rows.Scan(&sb, &at, &tn, &tpl, &user, &a, &m, &w, &c, &up, &down, &rd, &wr, &peak); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

func (l *benchLedger) measure(b *testing.B) benchFigures {
	b.Helper()
	ctx := context.Background()
	st := usage.NewStore(l.db, nil)
	r := l.all()
	f := benchFigures{rows: l.rows, exportPerSec: map[string]float64{}, exportRows: map[string]int64{},
		peakInuse: map[string]uint64{}, peakAlloc: map[string]uint64{}}
	var n int
	var d time.Duration
	f.scanPeakInuse, f.scanAlloc = peakHeap(func() {
		start := time.Now()
		n = scan(b, l.db, r)
		d = time.Since(start)
	})
	if n != l.rows {
		b.Fatalf("Got(scanned rows) = %d; want %d", n, l.rows)
	}
	f.scanPerSec = float64(n) / d.Seconds()
	for _, format := range []string{usage.FormatCSV, usage.FormatJSON} {
		var res usage.ExportResult
		var err error
		f.peakInuse[format], f.peakAlloc[format] = peakHeap(func() {
			start := time.Now()
			res, err = st.Export(ctx, io.Discard, usage.ExportQuery{Range: r, Format: format})
			d = time.Since(start)
		})
		if err != nil {
			b.Fatalf("export %s: %v", format, err)
		}
		if res.LedgerRows != int64(l.rows) {
			b.Fatalf("Got(export %s ledger rows) = %d; want %d", format, res.LedgerRows, l.rows)
		}
		f.exportPerSec[format] = float64(res.LedgerRows) / d.Seconds()
		f.exportRows[format] = res.Rows
	}
	return f
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// BenchmarkExport exports a SQLite ledger of 100,000 and then 1,000,000
// rows to io.Discard in CSV and JSON and reports ledger rows per second
// against a plain SELECT scan of the same rows (measured in the same run),
// and the peak heap above the baseline during each export: streaming keeps
// it flat, so the 1M/100k ratio of peak memory should be about 1. With
// -short: 10,000 and 100,000 rows.
func BenchmarkExport(b *testing.B) {
	small, large := 100_000, 1_000_000
	if testing.Short() {
		small, large = 10_000, 100_000
	}
	l := newBenchLedger(b)
	var figs []benchFigures
	for _, n := range []int{small, large} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			if l.rows < n {
				start := time.Now()
				l.grow(b, n)
				b.Logf("filled the ledger to %d rows (%d sandboxes) in %v", l.rows, l.sandbox, time.Since(start).Round(time.Millisecond))
			}
			b.ResetTimer()
			var f benchFigures
			for range b.N {
				f = l.measure(b)
			}
			b.StopTimer()
			figs = append(figs, f)
			b.ReportMetric(f.scanPerSec, "scan-rows/s")
			b.ReportMetric(f.exportPerSec[usage.FormatCSV], "csv-rows/s")
			b.ReportMetric(f.exportPerSec[usage.FormatJSON], "json-rows/s")
			b.ReportMetric(mib(f.peakInuse[usage.FormatCSV]), "csv-peak-inuse-MiB")
			b.ReportMetric(mib(f.peakInuse[usage.FormatJSON]), "json-peak-inuse-MiB")
			if n == large {
				benchrec.Record(b, benchrec.Result{Name: "usage_export_csv_vs_scan", Value: f.exportPerSec[usage.FormatCSV], Unit: "rows/s", Baseline: f.scanPerSec})
			}
			if len(figs) == 2 {
				b.Log("\n" + benchSummary(figs))
			}
		})
	}
}

// benchSummary is one line per size and the memory ratios (benchmark
// output beyond ten lines is cut).
func benchSummary(figs []benchFigures) string {
	var out strings.Builder
	fmt.Fprintf(&out, "usage export from SQLite to io.Discard: ledger rows per second, against a plain SELECT scan; peak heap above the baseline (HeapInuse/HeapAlloc)\n")
	for _, f := range figs {
		fmt.Fprintf(&out, "%8d rows: scan %.0f/s (peak %.1f/%.1f MiB)", f.rows, f.scanPerSec, mib(f.scanPeakInuse), mib(f.scanAlloc))
		for _, format := range []string{usage.FormatCSV, usage.FormatJSON} {
			fmt.Fprintf(&out, " | %s %.0f/s = %.2f x scan, %d rows out, peak %.1f/%.1f MiB", format, f.exportPerSec[format],
				f.exportPerSec[format]/f.scanPerSec, f.exportRows[format], mib(f.peakInuse[format]), mib(f.peakAlloc[format]))
		}
		out.WriteString("\n")
	}
	fmt.Fprintf(&out, "peak memory %d rows / %d rows (flat is about 1):", figs[1].rows, figs[0].rows)
	for _, format := range []string{usage.FormatCSV, usage.FormatJSON} {
		inuse := float64(max(figs[1].peakInuse[format], 1)) / float64(max(figs[0].peakInuse[format], 1))
		alloc := float64(max(figs[1].peakAlloc[format], 1)) / float64(max(figs[0].peakAlloc[format], 1))
		fmt.Fprintf(&out, " %s HeapInuse %.2f, HeapAlloc %.2f;", format, inuse, alloc)
	}
	return out.String()
}
