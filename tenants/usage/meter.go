// Package usage meters what sandboxes use and prices it: a meter per
// sandbox, a ledger of what each sandbox used in each hour, raw samples for
// charts, the operator's price book, queries for pages and quotas, and
// FOCUS-style exports streamed row by row.
//
// Accounting is idempotent: a meter keeps the cumulative cgroup figures and
// the instant it has accounted up to, and every change to the ledger happens
// in the transaction that moves the meter. A sample seen twice, a restart in
// the middle of a run, or two replicas sampling the same sandbox add nothing.
package usage

import (
	"errors"
	"fmt"
	"math"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Meter is what has been accounted of one sandbox so far.
type Meter struct {
	SandboxID       string     `gorm:"column:sandbox_id;primaryKey"`
	TenantID        string     `gorm:"column:tenant_id"`
	Template        string     `gorm:"column:template"`
	UserID          string     `gorm:"column:user_id"`
	UserName        string     `gorm:"column:user_name"`
	VCPUs           int        `gorm:"column:vcpus"`
	MemoryMiB       int        `gorm:"column:memory_mib"`
	StartedAt       time.Time  `gorm:"column:started_at"`
	AccountedTo     time.Time  `gorm:"column:accounted_to"`
	LastSampleAt    *time.Time `gorm:"column:last_sample_at"`
	ClosedAt        *time.Time `gorm:"column:closed_at"`
	CPUNS           int64      `gorm:"column:cpu_ns"`
	IOReadBytes     int64      `gorm:"column:io_read_bytes"`
	IOWriteBytes    int64      `gorm:"column:io_write_bytes"`
	MemoryPeakBytes int64      `gorm:"column:memory_peak_bytes"`
	// VMCPUNS is libvirt's CPU time of the sandbox's VM at the last sample
	// that carried it (0: none yet): the base of the cross-check.
	VMCPUNS int64 `gorm:"column:vm_cpu_ns"`
	// PausedAt is set while the sandbox is paused: see SetPaused.
	PausedAt *time.Time `gorm:"column:paused_at"`
}

// TableName is the GORM table of Meter.
func (Meter) TableName() string { return "usage_meters" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (m *Meter) AfterFind(*gorm.DB) error {
	m.StartedAt, m.AccountedTo = m.StartedAt.UTC(), m.AccountedTo.UTC()
	for _, p := range []**time.Time{&m.LastSampleAt, &m.ClosedAt, &m.PausedAt} {
		if *p != nil {
			u := (*p).UTC()
			*p = &u
		}
	}
	return nil
}

// Sample is one reading of a sandbox's cgroup: cumulative counters as the
// kernel keeps them from the sandbox's start. Everything but At and the VM
// figures is the guest's claim, and accounted as such (see Observe).
type Sample struct {
	// At is the host's time of the reading.
	At                 time.Time
	CPUNS              int64
	MemoryCurrentBytes int64
	MemoryPeakBytes    int64
	Pids               int
	IOReadBytes        int64
	IOWriteBytes       int64
	// VMCPUNS is libvirt's cumulative CPU time of the sandbox's VM when the
	// host read the sample (0: not known), and VMShare the sandbox's share
	// of that VM then (its vCPUs over those of the VM's running sandboxes).
	// The host measures both: the guest cannot make them smaller.
	VMCPUNS int64
	VMShare float64
}

// SampleRow is a stored sample.
type SampleRow struct {
	SandboxID          string    `gorm:"column:sandbox_id;primaryKey"`
	At                 time.Time `gorm:"column:at;primaryKey"`
	TenantID           string    `gorm:"column:tenant_id"`
	CPUNS              int64     `gorm:"column:cpu_ns"`
	MemoryCurrentBytes int64     `gorm:"column:memory_current_bytes"`
	MemoryPeakBytes    int64     `gorm:"column:memory_peak_bytes"`
	Pids               int       `gorm:"column:pids"`
	IOReadBytes        int64     `gorm:"column:io_read_bytes"`
	IOWriteBytes       int64     `gorm:"column:io_write_bytes"`
}

// TableName is the GORM table of SampleRow.
func (SampleRow) TableName() string { return "usage_samples" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (r *SampleRow) AfterFind(*gorm.DB) error {
	r.At = r.At.UTC()
	return nil
}

// Entry is one ledger row: what one sandbox used in one hour.
type Entry struct {
	TenantID        string    `gorm:"column:tenant_id;primaryKey"`
	SandboxID       string    `gorm:"column:sandbox_id;primaryKey"`
	PeriodStart     time.Time `gorm:"column:period_start;primaryKey"`
	Template        string    `gorm:"column:template"`
	UserID          string    `gorm:"column:user_id"`
	AllocVCPUMS     int64     `gorm:"column:alloc_vcpu_ms"`
	AllocMiBMS      int64     `gorm:"column:alloc_mib_ms"`
	WallMS          int64     `gorm:"column:wall_ms"`
	CPUNS           int64     `gorm:"column:cpu_ns"`
	EgressUpBytes   int64     `gorm:"column:egress_up_bytes"`
	EgressDownBytes int64     `gorm:"column:egress_down_bytes"`
	IOReadBytes     int64     `gorm:"column:io_read_bytes"`
	IOWriteBytes    int64     `gorm:"column:io_write_bytes"`
	MemoryPeakBytes int64     `gorm:"column:memory_peak_bytes"`
	// VMCPUNS is the sandbox's share of the CPU time libvirt measured for
	// its VM: the CPU-hours quota counts the larger of this and CPUNS.
	VMCPUNS int64 `gorm:"column:vm_cpu_ns"`
}

// TableName is the GORM table of Entry.
func (Entry) TableName() string { return "usage_ledger" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (e *Entry) AfterFind(*gorm.DB) error {
	e.PeriodStart = e.PeriodStart.UTC()
	return nil
}

// Period is the ledger's granularity: usage is kept per sandbox per hour.
const Period = time.Hour

// ErrNoMeter: the sandbox never ran, so nothing of it is metered.
var ErrNoMeter = errors.New("no usage meter")

func ts(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Open starts metering a sandbox that began running at m.StartedAt. A meter
// that exists already is left as it is.
func Open(tx *gorm.DB, m Meter) error {
	m.StartedAt = ts(m.StartedAt)
	m.AccountedTo, m.LastSampleAt, m.ClosedAt, m.PausedAt = m.StartedAt, nil, nil, nil
	m.CPUNS, m.IOReadBytes, m.IOWriteBytes, m.MemoryPeakBytes, m.VMCPUNS = 0, 0, 0, 0, 0
	if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&m).Error; err != nil {
		return fmt.Errorf("open usage meter of sandbox %s: %w", m.SandboxID, err)
	}
	return nil
}

// MaxIOBytesPerSecond is the most disk I/O one sandbox is taken to do per
// second: a guest's I/O counters cannot claim more than this times the time
// since the last sample.
const MaxIOBytesPerSecond = 16 << 30

// Observe accounts a sample of an open sandbox: its allocation from the
// meter's last instant up to the sample's, and the growth of its cumulative
// counters since the last sample accounted. With end set, the sandbox
// stopped at *end: its allocation is accounted up to there (never past the
// sample, never before what is accounted already) and the meter closes; a
// closed meter still takes counter growth (a final sample read after the
// stop) but no more allocation. sample may be nil (nothing measured: a VM
// that vanished). It returns the meter as it now stands.
//
// The counters come from the guest, so they are held to what is physically
// possible (see grown): CPU growth to the sandbox's vCPUs times the time
// since the last sample, I/O to MaxIOBytesPerSecond times it, the memory
// peak to the sandbox's memory; a counter that went down was reset and
// counts from zero; a sample not newer than the last one (a second replica's
// late reading) moves no counter. The VM figures, which the host measured,
// are accounted beside the guest's CPU (Entry.VMCPUNS).
func Observe(tx *gorm.DB, sandboxID string, sample *Sample, end *time.Time) (Meter, error) {
	var m Meter
	err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Take(&m, "sandbox_id = ?", sandboxID).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Meter{}, fmt.Errorf("sandbox %s: %w", sandboxID, ErrNoMeter)
	}
	if err != nil {
		return Meter{}, fmt.Errorf("usage meter of sandbox %s: %w", sandboxID, err)
	}
	from, to := m.AccountedTo, m.AccountedTo
	if m.ClosedAt == nil {
		switch {
		case end != nil:
			to = ts(*end)
			if sample != nil && to.After(ts(sample.At)) {
				to = ts(sample.At) // what the guest said cannot bill past the host's reading
			}
		case sample != nil:
			to = ts(sample.At)
		}
		if to.Before(from) {
			to = from
		}
	}
	var d delta
	d.wallMS = m.msAt(to) - m.msAt(from)
	prev := m.StartedAt
	if m.LastSampleAt != nil {
		prev = *m.LastSampleAt
	}
	fresh := sample != nil && (m.LastSampleAt == nil || ts(sample.At).After(prev))
	var cpuBase, readBase, writeBase int64
	if fresh {
		elapsed := max(ts(sample.At).Sub(prev), 0)
		d.cpuNS, cpuBase = grown(m.CPUNS, sample.CPUNS, mulSat(int64(max(m.VCPUs, 1)), elapsed.Nanoseconds()))
		ioLimit := int64(min(float64(MaxIOBytesPerSecond)*elapsed.Seconds(), math.MaxInt64/4))
		d.ioRead, readBase = grown(m.IOReadBytes, sample.IOReadBytes, ioLimit)
		d.ioWrite, writeBase = grown(m.IOWriteBytes, sample.IOWriteBytes, ioLimit)
		d.peak = max(sample.MemoryPeakBytes, sample.MemoryCurrentBytes, 0)
		if m.MemoryMiB > 0 {
			d.peak = min(d.peak, int64(m.MemoryMiB)<<20)
		}
		if sample.VMCPUNS > 0 && m.VMCPUNS > 0 && sample.VMCPUNS > m.VMCPUNS {
			share := min(max(sample.VMShare, 0), 1)
			d.vmCPUNS = int64(float64(sample.VMCPUNS-m.VMCPUNS) * share)
		}
	}
	if err := accrue(tx, m, from, to, d); err != nil {
		return Meter{}, err
	}
	set := map[string]any{"accounted_to": to}
	if fresh {
		at := ts(sample.At)
		m.CPUNS, m.IOReadBytes, m.IOWriteBytes = cpuBase, readBase, writeBase
		m.MemoryPeakBytes = max(m.MemoryPeakBytes, d.peak)
		if sample.VMCPUNS > 0 {
			m.VMCPUNS = sample.VMCPUNS
			set["vm_cpu_ns"] = m.VMCPUNS
		}
		m.LastSampleAt = &at
		set["cpu_ns"], set["io_read_bytes"], set["io_write_bytes"] = m.CPUNS, m.IOReadBytes, m.IOWriteBytes
		set["memory_peak_bytes"], set["last_sample_at"] = m.MemoryPeakBytes, at
		row := SampleRow{SandboxID: sandboxID, At: at, TenantID: m.TenantID, CPUNS: m.CPUNS,
			MemoryCurrentBytes: min(max(sample.MemoryCurrentBytes, 0), max(d.peak, 0)), MemoryPeakBytes: d.peak, Pids: max(sample.Pids, 0),
			IOReadBytes: m.IOReadBytes, IOWriteBytes: m.IOWriteBytes}
		if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error; err != nil {
			return Meter{}, fmt.Errorf("store usage sample of sandbox %s: %w", sandboxID, err)
		}
	}
	if end != nil && m.ClosedAt == nil {
		m.ClosedAt = &to
		set["closed_at"] = to
	}
	m.AccountedTo = to
	if err := tx.Model(&Meter{}).Where("sandbox_id = ?", sandboxID).Updates(set).Error; err != nil {
		return Meter{}, fmt.Errorf("move usage meter of sandbox %s: %w", sandboxID, err)
	}
	return m, nil
}

// grown is what a cumulative counter of the guest added since the meter's
// base (what it accounted of the counter so far), held to limit (what is
// physically possible since the last sample), and the new base. The base
// moves by what was accounted, not to the reading: growth held back (a busy
// sandbox whose last reading reached the host late) is accounted with the
// next samples, so an honest counter is billed exactly over time, and an
// inflated one at most limit each time. A counter below the base was reset
// (a new cgroup, a restarted guest): all of cur is new, as Prometheus'
// rate() takes it. A negative reading is 0.
func grown(base, cur, limit int64) (d, next int64) {
	cur = max(cur, 0)
	if cur < base {
		base = 0
	}
	d = min(cur-base, max(limit, 0))
	return d, base + d
}

// mulSat is a*b for non-negative a and b, at most math.MaxInt64.
func mulSat(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// Egress accounts bytes a sandbox moved through the egress gateway in one
// connection that ended at at. The gateway calls it in the transaction that
// records the connection, so each connection counts once.
func Egress(tx *gorm.DB, tenantID, sandboxID string, up, down int64, at time.Time) error {
	if up <= 0 && down <= 0 {
		return nil
	}
	var m Meter
	err := tx.Take(&m, "sandbox_id = ? AND tenant_id = ?", sandboxID, tenantID).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		m = Meter{SandboxID: sandboxID, TenantID: tenantID}
	case err != nil:
		return fmt.Errorf("usage meter of sandbox %s: %w", sandboxID, err)
	}
	e := Entry{SandboxID: sandboxID, PeriodStart: ts(at).Truncate(Period), TenantID: tenantID, Template: m.Template,
		UserID: m.UserID, EgressUpBytes: max(up, 0), EgressDownBytes: max(down, 0)}
	return upsert(tx, []Entry{e})
}

// msAt is the meter's whole milliseconds from its start to t. Every
// interval's length is a difference of two of these, so the lengths add up
// to the lifetime exactly, however many samples cut it.
func (m Meter) msAt(t time.Time) int64 { return t.Sub(m.StartedAt).Milliseconds() }

// delta is what one observation adds.
type delta struct {
	wallMS                 int64
	cpuNS, ioRead, ioWrite int64
	peak                   int64
	vmCPUNS                int64
}

// accrue spreads d over the hours of [from, to): allocation by the time in
// each hour, measured counters in proportion to it (the remainder goes to
// the last hour, so sums stay exact). An empty interval puts the counters in
// the hour of from.
func accrue(tx *gorm.DB, m Meter, from, to time.Time, d delta) error {
	if d.wallMS == 0 && d.cpuNS == 0 && d.ioRead == 0 && d.ioWrite == 0 && d.peak == 0 && d.vmCPUNS == 0 {
		return nil
	}
	base := Entry{SandboxID: m.SandboxID, TenantID: m.TenantID, Template: m.Template, UserID: m.UserID}
	var rows []Entry
	total := to.Sub(from)
	if total <= 0 {
		e := base
		e.PeriodStart = from.Truncate(Period)
		e.CPUNS, e.IOReadBytes, e.IOWriteBytes, e.MemoryPeakBytes, e.VMCPUNS = d.cpuNS, d.ioRead, d.ioWrite, d.peak, d.vmCPUNS
		return upsert(tx, []Entry{e})
	}
	var used struct{ wall, cpu, r, w, vm int64 }
	for start := from; start.Before(to); {
		next := start.Truncate(Period).Add(Period)
		end := next
		last := !next.Before(to)
		if last {
			end = to
		}
		e := base
		e.PeriodStart = start.Truncate(Period)
		e.MemoryPeakBytes = d.peak
		if last {
			e.WallMS = d.wallMS - used.wall
			e.CPUNS, e.IOReadBytes, e.IOWriteBytes = d.cpuNS-used.cpu, d.ioRead-used.r, d.ioWrite-used.w
			e.VMCPUNS = d.vmCPUNS - used.vm
		} else {
			part := end.Sub(start)
			e.WallMS = min(m.msAt(end)-m.msAt(start), d.wallMS-used.wall)
			e.CPUNS = share(d.cpuNS, part, total)
			e.IOReadBytes, e.IOWriteBytes = share(d.ioRead, part, total), share(d.ioWrite, part, total)
			e.VMCPUNS = share(d.vmCPUNS, part, total)
		}
		used.wall += e.WallMS
		used.cpu += e.CPUNS
		used.r += e.IOReadBytes
		used.w += e.IOWriteBytes
		used.vm += e.VMCPUNS
		e.AllocVCPUMS = e.WallMS * int64(m.billedVCPUs())
		e.AllocMiBMS = e.WallMS * int64(m.MemoryMiB)
		rows = append(rows, e)
		start = end
	}
	return upsert(tx, rows)
}

// share is n * part / total without overflowing.
func share(n int64, part, total time.Duration) int64 {
	if total <= 0 {
		return 0
	}
	return int64(float64(n) * float64(part) / float64(total))
}

// upsert adds rows to the ledger: sums for the quantities, the larger peak.
func upsert(tx *gorm.DB, rows []Entry) error {
	greatest := "GREATEST"
	if tx.Dialector.Name() == "sqlite" {
		greatest = "MAX"
	}
	add := func(col string) clause.Assignment {
		return clause.Assignment{Column: clause.Column{Name: col}, Value: gorm.Expr("usage_ledger." + col + " + excluded." + col)}
	}
	set := clause.Set{add("alloc_vcpu_ms"), add("alloc_mib_ms"), add("wall_ms"), add("cpu_ns"), add("egress_up_bytes"),
		add("egress_down_bytes"), add("io_read_bytes"), add("io_write_bytes"), add("vm_cpu_ns"),
		{Column: clause.Column{Name: "memory_peak_bytes"},
			Value: gorm.Expr(greatest + "(usage_ledger.memory_peak_bytes, excluded.memory_peak_bytes)")}}
	for i := range rows {
		rows[i].PeriodStart = ts(rows[i].PeriodStart)
		err := tx.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "tenant_id"}, {Name: "sandbox_id"}, {Name: "period_start"}},
			DoUpdates: set,
		}).Create(&rows[i]).Error
		if err != nil {
			return fmt.Errorf("add to usage ledger: %w", err)
		}
	}
	return nil
}
