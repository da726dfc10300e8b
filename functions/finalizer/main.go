// Command finalizer assembles a finished batch's output and error files (SQS finalize queue).
package main

import (
	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/lambdasqs"
)

func main() {
	app.Start("finalizer", func(a *app.App) app.Handler[events.SQSEvent, events.SQSEventResponse] {
		return lambdasqs.Handler(a.Engine.Finalize)
	})
}
