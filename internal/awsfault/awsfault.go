// Package awsfault injects the faults the emulator never produces into
// real AWS SDK calls (docs/design.md "Fault model"): a call that fails
// before it takes effect, one that fails after it took effect (the caller
// sees an error for a write that happened, as after a timeout), and
// DynamoDB's TransactionConflict. It is an SDK middleware added to
// aws.Config.APIOptions by tests and chaos runs; nothing in a deployment
// wires it.
package awsfault

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"

	"github.com/aws/aws-lambda-go/lambdacontext"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// Kind is what a fault does.
type Kind int

const (
	// Before fails the call without sending it.
	Before Kind = iota
	// After sends the call, lets it take effect, then fails it.
	After
	// Conflict cancels a TransactWriteItems call with TransactionConflict,
	// or rejects a PutItem, UpdateItem or DeleteItem with
	// TransactionConflictException (a write to an item an ongoing
	// transaction includes), without sending it.
	Conflict
	// Throttle fails the call, unsent, with the service's throttling error
	// (ThrottlingException, ProvisionedThroughputExceededException, SlowDown)
	// as if the SDK's own retries ran out.
	Throttle
	// Die fails the call, unsent, and every later call of the same Lambda
	// invocation: the function died between two AWS calls, and nothing it
	// would have done after takes effect.
	Die
)

func (k Kind) String() string {
	return [...]string{"before", "after", "conflict", "throttle", "die"}[k]
}

// Rule says which calls fail and how.
type Rule struct {
	Service   string // the SDK's service id: "DynamoDB", "SQS", "S3"; "" any
	Operation string // "TransactWriteItems", "SendMessage", …; "" any
	Kind      Kind
	// Times is how many calls this rule fails; 0 is no limit.
	Times int
	// Prob is the chance a matching call fails; 0 means always.
	Prob float64
	// Match, if set, narrows the rule to calls whose input it accepts.
	Match func(ctx context.Context, input any) bool
}

// Injector applies rules to the calls of every client built from a config
// it was added to. It is safe for concurrent use.
type Injector struct {
	mu       sync.Mutex
	rng      *rand.Rand
	rules    []*rule
	injected map[string]int
	calls    map[string]int  // calls some rule applied to, by "Service.Operation"
	dead     map[string]bool // request ids of invocations that died
}

type rule struct {
	Rule
	fired int
}

// New returns an injector whose random choices follow seed.
func New(seed uint64) *Injector {
	return &Injector{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), injected: map[string]int{}, calls: map[string]int{}, dead: map[string]bool{}}
}

// Add adds a rule; rules are tried in the order added.
func (in *Injector) Add(r Rule) *Injector {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.rules = append(in.rules, &rule{Rule: r})
	return in
}

// Clear removes every rule (what was injected stays counted).
func (in *Injector) Clear() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.rules = nil
}

// Injected returns how many faults were injected, by "Service.Operation kind".
func (in *Injector) Injected() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return maps.Clone(in.injected)
}

// Calls returns how many calls at least one rule applied to (whether or not
// it fired), by "Service.Operation": what the faults are a share of.
func (in *Injector) Calls() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return maps.Clone(in.calls)
}

// Total is the number of faults injected so far.
func (in *Injector) Total() int {
	n := 0
	for _, v := range in.Injected() {
		n += v
	}
	return n
}

// APIOption is the middleware, for aws.Config.APIOptions.
func (in *Injector) APIOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("awsfault", in.handle), middleware.Before)
}

// pick returns the rule that fails this call, if any.
func (in *Injector) pick(ctx context.Context, service, op string, input any) (Kind, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	counted := false
	for _, r := range in.rules {
		if (r.Service != "" && r.Service != service) || (r.Operation != "" && r.Operation != op) {
			continue
		}
		if r.Times > 0 && r.fired >= r.Times {
			continue
		}
		if r.Kind == Conflict && !conflicts(input) {
			continue
		}
		if r.Match != nil && !r.Match(ctx, input) {
			continue
		}
		if !counted {
			in.calls[service+"."+op]++
			counted = true
		}
		if r.Prob > 0 && in.rng.Float64() >= r.Prob {
			continue
		}
		r.fired++
		in.injected[fmt.Sprintf("%s.%s %s", service, op, r.Kind)]++
		return r.Kind, true
	}
	return 0, false
}

// conflicts reports whether a call can meet a TransactionConflict: a
// transaction, or a write of one item.
func conflicts(input any) bool {
	switch input.(type) {
	case *dynamodb.TransactWriteItemsInput, *dynamodb.PutItemInput, *dynamodb.UpdateItemInput, *dynamodb.DeleteItemInput:
		return true
	}
	return false
}

// invocation is the Lambda request id a call is made for, if any.
func invocation(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		return lc.AwsRequestID
	}
	return ""
}

// isDead reports whether the call's invocation died earlier.
func (in *Injector) isDead(ctx context.Context) bool {
	id := invocation(ctx)
	if id == "" {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.dead[id]
}

func (in *Injector) handle(ctx context.Context, input middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	service, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	opErr := func(err error) error {
		return &smithy.OperationError{ServiceID: service, OperationName: op, Err: err}
	}
	if in.isDead(ctx) {
		return middleware.InitializeOutput{}, middleware.Metadata{}, opErr(&Error{Op: service + "." + op, Dead: true})
	}
	kind, ok := in.pick(ctx, service, op, input.Parameters)
	if !ok {
		return next.HandleInitialize(ctx, input)
	}
	switch kind {
	case Throttle:
		return middleware.InitializeOutput{}, middleware.Metadata{}, opErr(&smithy.GenericAPIError{Code: throttleCode(service), Message: "Rate exceeded (injected)", Fault: smithy.FaultServer})
	case Die:
		if id := invocation(ctx); id != "" {
			in.mu.Lock()
			if len(in.dead) > 100_000 {
				clear(in.dead)
			}
			in.dead[id] = true
			in.mu.Unlock()
		}
		return middleware.InitializeOutput{}, middleware.Metadata{}, opErr(&Error{Op: service + "." + op, Dead: true})
	case Conflict:
		tx, ok := input.Parameters.(*dynamodb.TransactWriteItemsInput)
		if !ok {
			return middleware.InitializeOutput{}, middleware.Metadata{}, opErr(&ddbtypes.TransactionConflictException{
				Message: ptr("Transaction is ongoing for the item (injected)")})
		}
		n := len(tx.TransactItems)
		reasons := make([]ddbtypes.CancellationReason, n)
		for i := range reasons {
			reasons[i].Code = ptr("None")
		}
		reasons[0].Code = ptr("TransactionConflict")
		reasons[0].Message = ptr("Transaction is ongoing for the item (injected)")
		return middleware.InitializeOutput{}, middleware.Metadata{}, opErr(&ddbtypes.TransactionCanceledException{
			Message:             ptr("Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict] (injected)"),
			CancellationReasons: reasons,
		})
	case After:
		out, md, err := next.HandleInitialize(ctx, input)
		if err != nil {
			return out, md, err
		}
		return middleware.InitializeOutput{}, md, opErr(&Error{Op: service + "." + op, After: true})
	default:
		return middleware.InitializeOutput{}, middleware.Metadata{}, opErr(&Error{Op: service + "." + op})
	}
}

// throttleCode is the error code a service throttles with.
func throttleCode(service string) string {
	switch service {
	case "DynamoDB":
		return "ProvisionedThroughputExceededException"
	case "S3":
		return "SlowDown"
	}
	return "ThrottlingException"
}

// Error is an injected failure.
type Error struct {
	Op    string
	After bool // the call took effect
	Dead  bool // the invocation died at or before this call
}

func (e *Error) Error() string {
	if e.Dead {
		return "awsfault: the function died before " + e.Op + " (injected)"
	}
	if e.After {
		return "awsfault: " + e.Op + " failed after it took effect (injected)"
	}
	return "awsfault: " + e.Op + " failed (injected)"
}

func ptr(s string) *string { return &s }

// UpdateExpression is a Rule.Match for DynamoDB UpdateItem calls whose
// update expression f accepts: chaos runs throttle the lease renewals
// among all updates by what they set.
func UpdateExpression(f func(expr string) bool) func(context.Context, any) bool {
	return func(_ context.Context, input any) bool {
		in, ok := input.(*dynamodb.UpdateItemInput)
		return ok && in.UpdateExpression != nil && f(*in.UpdateExpression)
	}
}
