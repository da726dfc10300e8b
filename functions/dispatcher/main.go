// Command dispatcher plans batches and releases their chunks to the work queue (SQS dispatch queue).
package main

import "github.com/relaybatch/relay/internal/app/fn"

func main() { fn.Dispatcher() }
