// Command dispatcher plans batches and releases their chunks to the work queue (SQS dispatch queue).
package main

import (
	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/lambdasqs"
)

func main() {
	app.Start("dispatcher", func(a *app.App) app.Handler[events.SQSEvent, events.SQSEventResponse] {
		return lambdasqs.Handler(a.Engine.Dispatch)
	})
}
