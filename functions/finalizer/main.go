// Command finalizer assembles a finished batch's output and error files (SQS finalize queue).
package main

import "github.com/relaybatch/relay/internal/app/fn"

func main() { fn.Finalizer() }
