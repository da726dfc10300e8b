// Command api is the API Gateway proxy function: the OpenAI and Anthropic
// batch APIs, buffered or streamed per route.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/relaybatch/relay/internal/apigw"
	"github.com/relaybatch/relay/internal/app"
)

func main() {
	a, err := app.Load(context.Background())
	if err != nil {
		slog.Error("start api", "err", err)
		os.Exit(1)
	}
	lambda.Start(apigw.Handler(a.API()))
}
