package main

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	meter "github.com/stockade-dev/stockade/tenants/usage"
)

// checkUsageAcrossFailover checks the usage of a sandbox metered by a
// killed replica and then by the one that took up its VM: the ledger's
// wall time is exactly the meter's span (no gap, no double count: each
// sample accounts from the watermark the last one left, whoever took it),
// its CPU is the meter's, and the survivor sampled it after the kill.
func checkUsageAcrossFailover(t *testing.T, dsn, dir, sandboxID string, killed time.Time) {
	t.Helper()
	ctx := context.Background()
	db, err := tenants.Open(ctx, dsn, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}()
	var m meter.Meter
	var ledger struct{ Wall, CPU int64 }
	var after int64
	// One snapshot: the meter and its ledger move together.
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Take(&m, "sandbox_id = ?", sandboxID).Error; err != nil {
			return err
		}
		if err := tx.Model(&meter.Entry{}).Select("COALESCE(SUM(wall_ms),0) AS wall, COALESCE(SUM(cpu_ns),0) AS cpu").
			Where("sandbox_id = ?", sandboxID).Scan(&ledger).Error; err != nil {
			return err
		}
		return tx.Model(&meter.SampleRow{}).Where("sandbox_id = ? AND at > ?", sandboxID, killed).Count(&after).Error
	}, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if want := m.AccountedTo.Sub(m.StartedAt).Milliseconds(); ledger.Wall != want {
		t.Errorf("Got(ledger wall time across the failover) = %d ms; want %d ms, the meter's span from start to its watermark", ledger.Wall, want)
	}
	if ledger.CPU != m.CPUNS {
		t.Errorf("Got(ledger CPU across the failover) = %d ns; want %d ns, the meter's cumulative CPU", ledger.CPU, m.CPUNS)
	}
	if after == 0 || m.LastSampleAt == nil || !m.LastSampleAt.After(killed) {
		t.Errorf("Got(samples after the kill) = %d, last at %v; want the surviving replica sampling the sandbox", after, m.LastSampleAt)
	}
	if m.CPUNS <= 0 {
		t.Errorf("Got(meter CPU) = %d ns; want the sandbox's CPU counted", m.CPUNS)
	}
}
