// Command api is the API Gateway proxy function: the OpenAI and Anthropic
// batch APIs, buffered or streamed per route.
package main

import (
	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/apigw"
	"github.com/relaybatch/relay/internal/app"
)

func main() {
	app.Start("api", func(a *app.App) app.Handler[events.APIGatewayProxyRequest, any] { return apigw.Handler(a.API()) })
}
