// Command deadletter closes chunks that kept failing with dead_letter error lines (SQS work DLQ).
package main

import (
	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/lambdasqs"
)

func main() {
	app.Start("deadletter", func(a *app.App) app.Handler[events.SQSEvent, events.SQSEventResponse] {
		return lambdasqs.Handler(a.Engine.DeadLetter)
	})
}
