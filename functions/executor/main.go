// Command executor runs one chunk of a batch against the model providers (SQS work queue).
package main

import "github.com/relaybatch/relay/internal/app"

func main() {
	app.Start("executor", func(a *app.App) any { return a.Engine.Execute })
}
