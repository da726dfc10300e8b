// Command dispatcher plans batches and releases their chunks to the work queue (SQS dispatch queue).
package main

import "github.com/relaybatch/relay/internal/app"

func main() {
	app.Start("dispatcher", func(a *app.App) any { return a.Engine.Dispatch })
}
