// Command executor runs one chunk of a batch against the model providers (SQS work queue).
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
		slog.Error("start executor", "err", err)
		os.Exit(1)
	}
	lambda.Start(a.Engine.Execute)
}
