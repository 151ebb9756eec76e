package usage

import (
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// billedVCPUs is how many vCPUs the meter bills per second of allocation
// now: none while the sandbox is paused (its cgroup frozen, it cannot run),
// its vCPUs otherwise. Memory stays allocated, and billed, either way.
func (m Meter) billedVCPUs() int {
	if m.PausedAt != nil {
		return 0
	}
	return m.VCPUs
}

// SetPaused records that the sandbox was paused (paused true) or resumed at
// at: its allocation up to at is accounted as it was until then (running
// or paused), and from at on as it is now. A closed meter, or one already
// in that state, is left as it is. The caller runs it in the transaction
// that records the pause or the resume, so the ledger and the sandbox's
// state move together (and survive a restart together).
func SetPaused(tx *gorm.DB, sandboxID string, at time.Time, paused bool) error {
	var m Meter
	err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Take(&m, "sandbox_id = ?", sandboxID).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil // never metered (started by a version that did not meter)
	}
	if err != nil {
		return fmt.Errorf("usage meter of sandbox %s: %w", sandboxID, err)
	}
	if m.ClosedAt != nil || (m.PausedAt != nil) == paused {
		return nil
	}
	from, to := m.AccountedTo, ts(at)
	if to.Before(from) {
		to = from
	}
	if err := accrue(tx, m, from, to, delta{wallMS: m.msAt(to) - m.msAt(from)}); err != nil {
		return err
	}
	set := map[string]any{"accounted_to": to, "paused_at": nil}
	if paused {
		set["paused_at"] = to
	}
	if err := tx.Model(&Meter{}).Where("sandbox_id = ?", sandboxID).Updates(set).Error; err != nil {
		return fmt.Errorf("pause usage meter of sandbox %s: %w", sandboxID, err)
	}
	return nil
}
