// Command deadletter closes chunks that kept failing with dead_letter error lines (SQS work DLQ).
package main

import "github.com/relaybatch/relay/internal/app/fn"

func main() { fn.DeadLetter() }
