// Command executor runs one chunk of a batch against the model providers (SQS work queue).
package main

import (
	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/lambdasqs"
)

func main() {
	app.Start("executor", func(a *app.App) app.Handler[events.SQSEvent, events.SQSEventResponse] {
		return lambdasqs.Handler(a.Engine.Execute)
	})
}
