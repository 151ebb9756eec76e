package terminaltest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/terminal"
)

// RecordedOutput is what every stored session's recording shows.
const RecordedOutput = "$ echo recorded\r\nrecorded\r\n$ exit\r\n"

// Record stores an ended terminal session of the tenant's sandbox, opened
// by by, with its recording in dataDir, as a session that ran would leave
// them (for route and page tests that run without terminals).
func Record(tb testing.TB, db *gorm.DB, dataDir, tenantID, sandboxID, by string) terminal.Session {
	tb.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	end := start.Add(3 * time.Second)
	rel := filepath.Join("recordings", tenantID, id.String()+".cast")
	cast := fmt.Sprintf("{\"version\": 2, \"width\": 80, \"height\": 24, \"timestamp\": %d}\n", start.Unix()) +
		"[0.100000, \"o\", \"$ \"]\n[1.000000, \"o\", \"echo recorded\\r\\nrecorded\\r\\n$ \"]\n[2.500000, \"o\", \"exit\\r\\n\"]\n"
	path := filepath.Join(dataDir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(cast), 0o600); err != nil {
		tb.Fatal(err)
	}
	code := 0
	sess := terminal.Session{
		ID: id.String(), TenantID: tenantID, SandboxID: sandboxID, OpenedBy: by, OpenedByName: by, OpenedByKind: "user",
		ArgvJSON: `["/bin/sh"]`, Cols: 80, Rows: 24, StartedAt: start, EndedAt: &end, EndReason: "the process exited with code 0",
		ExitCode: &code, BytesOut: int64(len(RecordedOutput)), Recording: rel, RecordingBytes: int64(len(cast)), RetentionDays: 90,
		SeenAt: end,
	}
	if err := db.WithContext(context.Background()).Create(&sess).Error; err != nil {
		tb.Fatalf("store terminal session fixture: %v", err)
	}
	return sess
}
