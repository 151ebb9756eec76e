package sandboxtest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
)

// RecordProcess writes a process of the process API of tenantID's sandbox
// straight into db, ended (exit 0) unless state says otherwise: for tests
// of routes and stores without a VM.
func RecordProcess(tb testing.TB, db *gorm.DB, tenantID, sandboxID string, pid uint32, state string) sandbox.Process {
	tb.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	p := sandbox.Process{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenantID, SandboxID: sandboxID, PID: pid,
		ArgvJSON: `["sleep","600"]`, State: state, StartedBy: "fixture", StartedByName: "fixture", StartedAt: now.Add(-time.Minute)}
	if state != sandbox.ProcessRunning {
		code := 0
		p.ExitCode, p.Reason, p.EndedAt = &code, "exited", &now
	}
	if err := db.Create(&p).Error; err != nil {
		tb.Fatalf("record process: %v", err)
	}
	return p
}
