// Command dispatcher plans batches and releases their chunks to the work queue (SQS dispatch queue).
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
		slog.Error("start dispatcher", "err", err)
		os.Exit(1)
	}
	lambda.Start(a.Engine.Dispatch)
}
