// Command scheduler records a cron template's run each time EventBridge
// Scheduler fires the template's schedule.
package main

import "github.com/relaybatch/relay/internal/app"

func main() {
	app.Start("scheduler", func(a *app.App) any { return a.Batches.Fire })
}
