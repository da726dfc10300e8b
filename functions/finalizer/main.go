// Command finalizer assembles a finished batch's output and error files (SQS finalize queue).
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
		slog.Error("start finalizer", "err", err)
		os.Exit(1)
	}
	lambda.Start(a.Engine.Finalize)
}
