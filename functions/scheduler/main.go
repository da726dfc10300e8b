// Command scheduler records a cron template's run each time EventBridge
// Scheduler fires the template's schedule: the event is the schedule's
// input, as Scheduler sends it.
package main

import (
	"context"
	"encoding/json"

	"github.com/relaybatch/relay/internal/app"
)

func main() {
	app.Start("scheduler", func(a *app.App) app.Handler[json.RawMessage, struct{}] {
		return func(ctx context.Context, in json.RawMessage) (struct{}, error) {
			return struct{}{}, a.Batches.Fire(ctx, in)
		}
	})
}
