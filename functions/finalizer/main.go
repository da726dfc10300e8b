// Command finalizer assembles a finished batch's output and error files (SQS finalize queue).
package main

import (
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/lambdasqs"
)

func main() {
	app.Start("finalizer", func(a *app.App) any { return lambdasqs.Handler(a.Engine.Finalize) })
}
