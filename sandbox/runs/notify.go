package runs

import (
	"context"
	"strings"

	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// runSender is what NotifyWith needs of *notify.Sender.
type runSender interface {
	RunStarted(ctx context.Context, n workflow.Notify, r notify.RunResult) error
	RunEnded(ctx context.Context, n workflow.Notify, r notify.RunResult) error
}

// NotifyWith returns a Notifier that sends each ended run where its
// workflow says, linking to the run's page under publicURL.
func NotifyWith(s runSender, publicURL string) Notifier {
	return runNotifier{s: s, base: strings.TrimSuffix(publicURL, "/")}
}

type runNotifier struct {
	s    runSender
	base string
}

func (n runNotifier) RunStarted(ctx context.Context, def workflow.Definition, r Run) error {
	return n.s.RunStarted(ctx, def.Notify, Result(r, nil, n.base))
}

func (n runNotifier) RunEnded(ctx context.Context, def workflow.Definition, r Run, steps []Step) error {
	return n.s.RunEnded(ctx, def.Notify, Result(r, steps, n.base))
}

// Result is what is said about an ended run; its URL is the run's page
// under base ("" for none).
func Result(r Run, steps []Step, base string) notify.RunResult {
	out := notify.RunResult{TenantID: r.TenantID, RunID: r.ID, Workflow: r.Workflow, Number: r.Number, State: string(r.State),
		Reason: r.StateReason, Trigger: r.TriggerKind, Repository: r.Repository, Ref: r.Ref, SHA: r.SHA, PRNumber: r.PRNumber,
		Cost: r.Cost, Steps: make([]notify.Step, 0, len(steps))}
	if r.EndedAt != nil {
		out.DurationMS = r.Duration(*r.EndedAt).Milliseconds()
	}
	if base != "" {
		out.URL = base + "/runs/" + r.ID
	}
	for _, st := range steps {
		out.Steps = append(out.Steps, notify.Step{Name: st.Name, State: st.State, ExitCode: st.ExitCode, DurationMS: st.DurationMS})
	}
	return out
}
