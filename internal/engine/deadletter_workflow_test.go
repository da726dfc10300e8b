package engine

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/resources"
)

// spentWorkflows is a Workflow whose records saved steps that spent
// usage, counted in the tenant's usage or not.
type spentWorkflows struct {
	noWorkflows
	usage   inference.Usage
	counted bool
}

func (w spentWorkflows) Spent(context.Context, batch.Batch, batch.Chunk) (inference.Usage, bool, error) {
	return w.usage, w.counted, nil
}

// TestDeadLetteredRecordKeepsWhatItsStepsSpent: a workflow record out of
// attempts after saving steps that spent upstream (each counted in the
// tenant's daily usage with its checkpoint, docs/design.md "Governance")
// keeps that spend in its dead_letter line: the batch's usage counts its
// tokens, and the tenant's daily usage only its request, as its own end
// would. Before, the line had no usage: /v1/usage counted the steps'
// tokens and the batch's usage none of them.
func TestDeadLetteredRecordKeepsWhatItsStepsSpent(t *testing.T) {
	t.Parallel()
	for _, counted := range []bool{true, false} {
		e, table := runsFixture(t, newPeakProvider(0), chunkSpec{"x", 1, 1})
		c := table.chunkAt(0)
		c.Attempts = resources.WorkMaxReceiveCount + 1
		table.putChunk(c)
		spent := inference.Usage{InputTokens: 10, OutputTokens: 20, TotalTokens: 30}
		e.Workflow = spentWorkflows{usage: spent, counted: counted}
		m := msg.ForChunk(batch.Next{Tenant: c.Tenant, Batch: c.Batch, Chunk: c.Index, Run: c.Run, Attempt: c.Attempts})
		m.Type = msg.Dead
		body, _ := json.Marshal(m)

		failed, err := e.DeadLetter(context.Background(), []msg.Delivery{{ID: "dl", Body: string(body), ReceiveCount: 1}})

		commits := table.committed()
		if err != nil || len(failed) > 0 || len(commits) != 1 {
			t.Fatalf("DeadLetter: failed %v, err %v, %d commits: want the record's chunk committed", failed, err, len(commits))
		}
		cm := commits[0]
		wantDaily := int64(0)
		if !counted {
			wantDaily = spent.TotalTokens
		}
		if cm.DeadLetters != 1 || cm.Usage.TotalTokens != spent.TotalTokens || cm.UsageByModel["x"].Requests != 1 || cm.UsageByModel["x"].Total != wantDaily {
			t.Fatalf("counted %v: commit of %d dead letters, batch usage %+v, daily usage %+v; want 1, %d tokens in the batch's usage, 1 request and %d tokens in the daily usage",
				counted, cm.DeadLetters, cm.Usage, cm.UsageByModel, spent.TotalTokens, wantDaily)
		}
	}
}
