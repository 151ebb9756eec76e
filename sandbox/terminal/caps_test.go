package terminal_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"

	"github.com/stockade-dev/stockade/sandbox/terminal"
)

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// A recorder stops at its caps with a marker, and nothing follows it: the
// session's MaxBytes, or the tenant's budget its recorders share.
func TestRecorderCaps(t *testing.T) {
	chunk := strings.Repeat("x", 100)
	tests := []struct {
		name     string
		lim      func() terminal.RecorderLimits
		max      int
		wantWhy  string
		recorded int // of the 100 chunks, at most
	}{
		{"session cap", func() terminal.RecorderLimits { return terminal.RecorderLimits{MaxBytes: 4 << 10} }, 4 << 10,
			"the session's cap is 4 KiB", 40},
		{"tenant budget", func() terminal.RecorderLimits {
			return terminal.RecorderLimits{Budget: terminal.NewBudget(8<<10, 2<<10)}
		}, 2<<10 + 512, "the tenant's recordings reached their cap of 8 KiB", 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec, err := terminal.NewLimitedRecorder(nopCloser{&buf}, terminal.CastHeader{Width: 80, Height: 24}, time.Now(), nil, 1024, tc.lim())
			if err != nil {
				t.Fatal(err)
			}
			for range 100 {
				rec.Write([]byte(chunk))
			}
			st, err := rec.Close()
			if err != nil {
				t.Fatal(err)
			}
			// Filled up to the cap: the event that did not fit is cut to what does.
			if buf.Len() > tc.max || buf.Len() < tc.max-1024 || int64(buf.Len()) != st.Bytes {
				t.Errorf("Got(recording size, stats) = %d, %d; want %d-%d, equal", buf.Len(), st.Bytes, tc.max-1024, tc.max)
			}
			if !strings.HasPrefix(st.Truncated, "truncated at ") || !strings.Contains(st.Truncated, tc.wantWhy) {
				t.Errorf("Got(Truncated) = %q; want where and %q", st.Truncated, tc.wantWhy)
			}
			cast, err := terminal.ReadCast(&buf)
			if err != nil {
				t.Fatal(err)
			}
			last := cast.Events[len(cast.Events)-1]
			if last.Kind != terminal.CastMarker || !strings.Contains(last.Data, st.Truncated) {
				t.Errorf("Got(last event) = %+v; want the marker saying %q", last, st.Truncated)
			}
			out := len(cast.Output())
			if out > tc.recorded*len(chunk) || out == 0 || int64(out)+st.TruncatedBytes != int64(100*len(chunk)) {
				t.Errorf("Got(recorded, left out) = %d, %d bytes; want some, at most %d, adding up to %d", out, st.TruncatedBytes,
					tc.recorded*len(chunk), 100*len(chunk))
			}
		})
	}
}

// TestServiceRecordingCaps: a terminal that prints more than its session's
// cap keeps working to the end, while its recording stops at the cap with a
// marker, and the session row, its audit event and the recording say so.
// A tenant whose recordings reach the tenant cap gets truncated recordings;
// another tenant does not.
func TestServiceRecordingCaps(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			f := newFixture(t, d.DB, terminal.Config{MaxRecordingBytes: 16 << 10, MaxTenantRecordingBytes: 40 << 10})
			ctx := context.Background()
			run := func(tenantID, sandboxID string, n int) terminal.Session {
				t.Helper()
				ada := person("ada@alpha.test")
				sess, err := f.svc.Open(ctx, ada, tenantID, sandboxID, terminal.OpenRequest{Cols: 80, Rows: 24})
				if err != nil {
					t.Fatal(err)
				}
				c, err := f.svc.Join(ctx, ada, tenantID, sandboxID, sess.ID, terminal.JoinRequest{Drive: true, CanDrive: true, Offset: 0})
				if err != nil {
					t.Fatal(err)
				}
				k := collect(c)
				k.hello(t)
				c.Input([]byte(fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x; echo; echo still-$((40+2)); exit 3\n", n)))
				k.wait(t)
				if !strings.Contains(string(k.output()), "still-42") {
					t.Fatalf("Got(terminal output) without still-42: the terminal stopped with its recording")
				}
				return waitEnded(t, f.svc, tenantID, sess.ID)
			}
			big := run(f.a.ID, f.sa.ID, 100<<10)
			if big.ExitCode == nil || *big.ExitCode != 3 {
				t.Errorf("Got(exit) = %v; want 3: the terminal ran to its end", big.ExitCode)
			}
			if !strings.Contains(big.RecordingTruncated, "truncated at") || !strings.Contains(big.RecordingTruncated, "the session's cap is 16 KiB") ||
				big.TruncatedBytes == 0 || big.RecordingBytes > 16<<10 {
				t.Errorf("Got(session) truncated %q, %d left out, %d bytes; want truncated at the 16 KiB session cap", big.RecordingTruncated,
					big.TruncatedBytes, big.RecordingBytes)
			}
			rf, _, err := f.svc.OpenRecording(ctx, f.a.ID, big.ID)
			if err != nil {
				t.Fatal(err)
			}
			cast, err := terminal.ReadCast(rf)
			rf.Close()
			if err != nil {
				t.Fatal(err)
			}
			if last := cast.Events[len(cast.Events)-1]; last.Kind != terminal.CastMarker || !strings.Contains(last.Data, big.RecordingTruncated) {
				t.Errorf("Got(last event of the recording) = %+v; want the marker", last)
			}
			if strings.Contains(string(cast.Output()), "still-42") {
				t.Errorf("Got(recording) holds output after its cap")
			}
			var ev audit.Event
			if err := f.db.Where("target_id = ? AND type = ?", big.ID, audit.TypeTerminalClosed).Take(&ev).Error; err != nil {
				t.Fatal(err)
			}
			if ev.Details["recording_truncated"] != big.RecordingTruncated {
				t.Errorf("Got(terminal.closed details) = %v; want recording_truncated", ev.Details)
			}

			// Tenant A holds ~16 KiB now; two more of ~15 KiB reach its 40 KiB.
			run(f.a.ID, f.sa.ID, 14<<10)
			third := run(f.a.ID, f.sa.ID, 14<<10)
			if !strings.Contains(third.RecordingTruncated, "the tenant's recordings reached their cap of 40 KiB") {
				t.Errorf("Got(third session truncated) = %q; want the tenant cap", third.RecordingTruncated)
			}
			list, err := f.svc.Sessions(ctx, f.a.ID, "")
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for _, s := range list {
				total += s.RecordingBytes
			}
			if total > 40<<10+512 {
				t.Errorf("Got(tenant A's recordings) = %d bytes; want at most the 40 KiB cap and a marker", total)
			}
			other := run(f.b.ID, f.sb.ID, 14<<10)
			if other.RecordingTruncated != "" {
				t.Errorf("Got(tenant B's session truncated) = %q; want its own budget untouched", other.RecordingTruncated)
			}
		})
	}
}
