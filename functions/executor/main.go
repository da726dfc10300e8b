// Command executor runs one chunk of a batch against the model providers (SQS work queue).
package main

import "github.com/relaybatch/relay/internal/app/fn"

func main() { fn.Executor() }
