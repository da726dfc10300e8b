// Command deadletter closes chunks that kept failing with dead_letter error lines (SQS work DLQ).
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
		slog.Error("start deadletter", "err", err)
		os.Exit(1)
	}
	lambda.Start(a.Engine.DeadLetter)
}
