// Command webhook delivers completion webhooks, one signed attempt per
// message, re-enqueueing failed ones with a delay (SQS webhook queue).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/relaybatch/relay/internal/app"
)

func main() {
	a, err := app.Load(context.Background())
	if err != nil {
		slog.Error("start webhook", "err", err)
		os.Exit(1)
	}
	lambda.Start(a.Engine.DeliverWebhooks)
}
