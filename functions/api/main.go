// Command api is the API Gateway proxy function: the OpenAI and Anthropic
// batch APIs, buffered or streamed per route.
package main

import "github.com/relaybatch/relay/internal/app/fn"

func main() { fn.API() }
