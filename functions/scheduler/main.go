// Command scheduler records a cron template's run each time EventBridge
// Scheduler fires the template's schedule: the event is the schedule's
// input, as Scheduler sends it.
package main

import "github.com/relaybatch/relay/internal/app/fn"

func main() { fn.Scheduler() }
