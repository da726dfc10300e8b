package batch

// Group is a group of a batch's chunks that runs as one provider batch
// (internal/native; docs/design.md "Native batches"): its item sits beside
// the chunks, B#<batch> / NATIVE#<index>. Its state goes
//
//	pending → submitting → submitted → ended
//
// submitting is recorded before the provider batch is created, so a retry
// knows to look for an orphan; the provider batch's id is recorded once,
// and only that batch's results are imported.
type Group struct {
	Batch  string `dynamodbav:"batch"`
	Tenant string `dynamodbav:"tenant"`
	Index  int    `dynamodbav:"index"`
	Model  string `dynamodbav:"model"`
	// Chunks are the indexes of the group's chunks, all of Model.
	Chunks []int      `dynamodbav:"chunks"`
	Rows   int        `dynamodbav:"rows"`
	State  GroupState `dynamodbav:"state"`
	// Submits counts submit attempts; SubmitAt is the latest one's start
	// (unix seconds): an orphan is no older.
	Submits  int   `dynamodbav:"submits"`
	SubmitAt int64 `dynamodbav:"submit_at"`
	// ProviderID is the provider batch the group's results come from.
	ProviderID string `dynamodbav:"provider_id"`
	// Orphans are provider batches of the group found unrecorded and
	// cancelled.
	Orphans []string `dynamodbav:"orphans"`
	// Polls numbers the poll messages: only the current one acts.
	Polls int `dynamodbav:"polls"`
	// CancelSent is set once the provider batch was asked to cancel (the
	// batch's cancel, or its window close to its end).
	CancelSent bool `dynamodbav:"cancel_sent"`
	// Step fences the group's current step (docs/design.md "Native
	// batches"): "<type>#<number>#<holder>" of the delivery running it,
	// StepUntil when its fence ends unless renewed (unix milliseconds).
	Step      string `dynamodbav:"step,omitempty"`
	StepUntil int64  `dynamodbav:"step_until,omitempty"`
}

// GroupState is a Group's state.
type GroupState string

const (
	GroupPending    GroupState = "pending"
	GroupSubmitting GroupState = "submitting"
	GroupSubmitted  GroupState = "submitted"
	GroupEnded      GroupState = "ended"
)

// Execution says how a batch ran (its execution extension): every row
// directly, on the providers' batch APIs, or both.
const (
	ExecDirect = "direct"
	ExecNative = "native"
	ExecHybrid = "hybrid"
)
