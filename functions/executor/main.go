// Command executor runs one chunk of a batch against the model providers (SQS work queue).
package main

import (
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/lambdasqs"
)

func main() {
	app.Start("executor", func(a *app.App) any { return lambdasqs.Handler(a.Engine.Execute) })
}
