package runs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/integrations"
)

// TestCompletedInOutbox: ending a run writes run.completed to the outbox
// in the same transaction, once: a second finish (a conflict) writes none.
func TestCompletedInOutbox(t *testing.T) {
	ctx := context.Background()
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			e.s.outbox = integrations.NewStore(e.db, integrations.Config{})
			r, err := e.s.Create(ctx, admin, e.a.ID, NewRun{Version: e.v, Trigger: Trigger{Kind: TriggerManual, Ref: "main", Repository: "acme/app"}})
			if err != nil {
				t.Fatal(err)
			}
			arts := []Artifact{{Path: "report.xml", Size: 12}}
			if err := e.s.finish(ctx, &r, StateFailed, `step "two": exit 1`, arts, 0.25); err != nil {
				t.Fatalf("finish() = %v", err)
			}
			if err := e.s.finish(ctx, &r, StateSucceeded, "", nil, 0); !errors.Is(err, errdefs.ErrConflict) {
				t.Fatalf("Got(finish again) = %v; want errdefs.ErrConflict", err)
			}
			var evs []integrations.Event
			if err := e.db.Where("tenant_id = ? AND event_type = ?", e.a.ID, EventCompleted).Find(&evs).Error; err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 {
				t.Fatalf("Got(run.completed events) = %d; want 1", len(evs))
			}
			var got CompletedEvent
			if err := json.Unmarshal([]byte(evs[0].Payload), &got); err != nil {
				t.Fatal(err)
			}
			if got.RunID != r.ID || got.State != StateFailed || got.Reason != `step "two": exit 1` || got.Cost != 0.25 ||
				got.Trigger.Repository != "acme/app" || len(got.Artifacts) != 1 || got.Workflow != "tests" || got.Number != r.Number {
				t.Errorf("Got(run.completed) = %+v; want run %s failed with its reason, cost, trigger and artifacts", got, r.ID)
			}
		})
	}
}
