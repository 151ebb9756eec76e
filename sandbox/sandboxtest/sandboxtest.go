// Package sandboxtest helps tests of sandboxes: stored sandbox records for
// route and page tests that run without VMs, and the shared guest image
// that VM tests boot.
package sandboxtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
)

// Record stores a running sandbox of the tenant, created by createdBy, with
// its events, as Service.Create would leave it; it is placed on no VM: a
// test without VMs only needs something to point at.
func Record(tb testing.TB, db *gorm.DB, tenantID, createdBy string) sandbox.Sandbox {
	tb.Helper()
	return RecordState(tb, db, tenantID, createdBy, sandbox.StateRunning)
}

// RecordState is Record with the sandbox in state (running, or an ended
// state). A running record would be failed by a started service's
// background loop, which finds no VM for it: give those an ended one.
func RecordState(tb testing.TB, db *gorm.DB, tenantID, createdBy string, state sandbox.State) sandbox.Sandbox {
	tb.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	sb := sandbox.Sandbox{
		ID: id.String(), TenantID: tenantID, State: state, StateReason: "fixture",
		Template: "busybox", VCPUs: 1, MemoryMiB: 64, TimeoutSeconds: 3600, EnvKeysJSON: "[]", MetadataJSON: `{"fixture":"` + id.String() + `"}`,
		CreatedBy: createdBy, CreatedByName: createdBy, CreatedAt: now, StartedAt: &now, ExpiresAt: now.Add(time.Hour),
	}
	states := []sandbox.State{sandbox.StateCreating, sandbox.StateRunning}
	if state != sandbox.StateRunning {
		sb.EndedAt = &now
		states = append(states, state)
	}
	err = db.WithContext(context.Background()).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&sb).Error; err != nil {
			return err
		}
		for i, st := range states {
			ev := sandbox.Event{ID: fmt.Sprintf("%s-%d", sb.ID, i), SandboxID: sb.ID, TenantID: tenantID, State: st,
				Reason: "fixture", Actor: createdBy, At: now}
			if err := tx.Create(&ev).Error; err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("store sandbox fixture: %v", err)
	}
	return sb
}
