// Command webhook delivers completion webhooks, one signed attempt per
// message, re-enqueueing failed ones with a delay (SQS webhook queue).
package main

import (
	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/lambdasqs"
)

func main() {
	app.Start("webhook", func(a *app.App) app.Handler[events.SQSEvent, events.SQSEventResponse] {
		return lambdasqs.Handler(a.Webhooks.Deliver)
	})
}
