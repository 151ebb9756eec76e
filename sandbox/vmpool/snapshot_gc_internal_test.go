package vmpool

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// TestSweepSnapshotsOfDeletedTenants (real SQLite, and PostgreSQL when
// STOCKADE_TEST_POSTGRES is set): the local sweep deletes the snapshot
// (every file of its slot: memory file, sidecar, scratch disk, spares) of a tenant that is no more, and keeps a live
// tenant's, a shared one's and a sidecar it cannot read.
func TestSweepSnapshotsOfDeletedTenants(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			db := d.DB
			tn, err := tenants.NewStore(db, nil).CreateTenant(ctx, audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "gc-live", "")
			if err != nil {
				t.Fatal(err)
			}
			s := &Service{cfg: Config{DataDir: t.TempDir()}, installID: "inst-gc", store: NewStore(db, nil),
				snaps: newSnapshots(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			dir := filepath.Join(s.cfg.DataDir, "hosts", s.installID)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			write := func(stem, tenant string, raw []byte) {
				if raw == nil {
					raw, _ = json.Marshal(snapshotMeta{Key: "k", Inputs: snapshotKey{Tenant: tenant, MemoryMiB: 512, VCPUs: 1}})
				}
				for p, b := range map[string][]byte{stem + ".json": raw, stem + ".snap": []byte("memory"), stem + ".scratch": []byte("disk"),
					stem + ".spare-1.snap": []byte("memory")} {
					if err := os.WriteFile(filepath.Join(dir, p), b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			write("snapshot-vm-512m-1c-t1111111111111111", "01f00000-0000-7000-8000-00000000dead", nil)
			write("snapshot-vm-512m-1c-t2222222222222222", tn.ID, nil)
			write("snapshot-vm-512m-1c", "", nil)
			write("snapshot-vm-1024m-1c-t3333333333333333", "", []byte("{half"))
			s.sweepSnapshots(ctx)
			tests := []struct {
				stem string
				kept bool
			}{
				{"snapshot-vm-512m-1c-t1111111111111111", false},
				{"snapshot-vm-512m-1c-t2222222222222222", true},
				{"snapshot-vm-512m-1c", true},
				{"snapshot-vm-1024m-1c-t3333333333333333", true},
			}
			for _, tt := range tests {
				for _, ext := range []string{".json", ".snap", ".scratch", ".spare-1.snap"} {
					_, err := os.Stat(filepath.Join(dir, tt.stem+ext))
					if got := err == nil; got != tt.kept || (err != nil && !errors.Is(err, os.ErrNotExist)) {
						t.Errorf("Got(%s%s kept) = %v (%v); want %v", tt.stem, ext, got, err, tt.kept)
					}
				}
			}
		})
	}
}
