// Package fn holds each Lambda function's main: functions/<name>/main.go
// calls its one, so the bootstrap runs exactly what the package's test
// starts without each variable of its environment (internal/app/inittest).
// Each is one app.Start call with a handler whose event and answer types
// the compiler checks (docs/design.md "Wiring").
package fn

import (
	"context"
	"encoding/json"

	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/apigw"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/lambdasqs"
	"github.com/relaybatch/relay/internal/msg"
)

// API is the API Gateway proxy function: the OpenAI and Anthropic batch
// APIs, buffered or streamed per route.
func API() {
	app.Start("api", func(a *app.App) app.Handler[events.APIGatewayProxyRequest, any] { return apigw.Handler(a.API()) })
}

// Dispatcher plans batches and releases their chunks to the work queue (SQS dispatch queue).
func Dispatcher() { startSQS("dispatcher", func(a *app.App) msg.Handler { return a.Engine.Dispatch }) }

// Executor runs one chunk of a batch against the model providers (SQS work queue).
func Executor() { startSQS("executor", func(a *app.App) msg.Handler { return a.Engine.Execute }) }

// DeadLetter closes chunks that kept failing with dead_letter error lines (SQS work DLQ).
func DeadLetter() {
	startSQS("deadletter", func(a *app.App) msg.Handler { return a.Engine.DeadLetter })
}

// Finalizer assembles a finished batch's output and error files (SQS finalize queue).
func Finalizer() { startSQS("finalizer", func(a *app.App) msg.Handler { return a.Engine.Finalize }) }

// Webhook delivers completion webhooks, one signed attempt per message,
// re-enqueueing failed ones with a delay (SQS webhook queue).
func Webhook() { startSQS("webhook", func(a *app.App) msg.Handler { return a.Webhooks.Deliver }) }

// Scheduler records a cron template's run each time EventBridge Scheduler
// fires the template's schedule: the event is the schedule's input, as
// Scheduler sends it.
func Scheduler() {
	app.Start("scheduler", func(a *app.App) app.Handler[json.RawMessage, struct{}] {
		return func(ctx context.Context, in json.RawMessage) (struct{}, error) {
			return struct{}{}, a.Batches.Fire(ctx, in)
		}
	})
}

// startSQS starts a function triggered by an SQS queue, whose handler
// reports each failed message (lambdasqs.Handler).
func startSQS(name string, pick func(*app.App) msg.Handler) {
	app.Start(name, func(a *app.App) app.Handler[events.SQSEvent, events.SQSEventResponse] {
		return lambdasqs.Handler(pick(a))
	})
}
