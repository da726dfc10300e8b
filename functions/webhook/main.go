// Command webhook delivers completion webhooks, one signed attempt per
// message, re-enqueueing failed ones with a delay (SQS webhook queue).
package main

import "github.com/relaybatch/relay/internal/app/fn"

func main() { fn.Webhook() }
