// Command finalizer assembles a finished batch's output and error files (SQS finalize queue).
package main

import "github.com/relaybatch/relay/internal/app"

func main() {
	app.Start("finalizer", func(a *app.App) any { return a.Engine.Finalize })
}
