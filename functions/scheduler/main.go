// Command scheduler records a cron template's run each time EventBridge
// Scheduler fires the template's schedule.
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
		slog.Error("start scheduler", "err", err)
		os.Exit(1)
	}
	lambda.Start(a.Engine.Fire)
}
