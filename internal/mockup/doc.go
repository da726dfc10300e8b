// Package mockup is a deterministic stand-in for the OpenAI and Anthropic
// model APIs. `relay mock-upstream`, `make dev`, the integration tests and
// the benchmarks point relay at it instead of a real provider, because
// every failure path relay handles (rate limits, server errors, bad
// requests, slow and hung calls, fallbacks) must be reproducible on demand.
//
// # Routes
//
// POST /v1/chat/completions, /v1/embeddings, /v1/responses,
// /v1/completions, /v1/moderations and /v1/images/generations answer like
// OpenAI; POST /v1/messages answers like Anthropic. Bodies decode with the
// official openai-go and anthropic-sdk-go clients. Nothing is random in a
// successful answer: ids (chatcmpl-…, msg_…, resp_…, cmpl-…, modr-…), the
// x-request-id header (req_…), embedding vectors and images derive from
// the sha256 of the request body (an image is the 32 bytes of a hash, not a
// picture), "created" is fixed, the reply text is "echo: " followed by the
// last user message (or prompt), and moderations flag nothing. Usage is counted in words: prompt tokens are the
// whitespace-separated words of every prompt text (messages, system,
// instructions, input, prompt) plus one per message; completion tokens are
// the words of the reply; chat completions and completions report half
// the prompt tokens as cached and half the completion tokens as reasoning
// (rounded down). Embedding inputs given as token arrays count one token
// per element. An image counts 16 output tokens; moderations carry no
// usage, as OpenAI's.
//
// Amazon Bedrock's runtime has two routes: POST /model/{modelId}/invoke
// (InvokeModel with Claude's body: anthropic_version bedrock-2023-05-31,
// no model in the body) answers the Anthropic message, and POST
// /openai/v1/chat/completions the chat completion. They take a Bedrock API
// key as a bearer token or a SigV4 signature; the mock cannot know the
// secret a request was signed with, so it checks the rest (sigv4.go): the
// AWS4-HMAC-SHA256 scheme, a credential scope of today, Options.Region
// (default us-east-1) and service bedrock, host, x-amz-date and every
// x-amz- header signed, a date within 15 minutes, a 64-hex signature. Any
// other request is refused with 403. Bedrock routes answer errors as AWS
// does ({"message"} with the exception in x-amzn-ErrorType: 429 is
// ThrottlingException, without Retry-After), and successes with the
// x-amzn-bedrock-input/output-token-count headers.
//
// A chat completion with "tools" calls each of its functions in turn, one
// a round: while the conversation holds fewer "tool" messages than there
// are tools, the answer is a tool call (id call_<n>, arguments
// {"round":n}, finish_reason tool_calls, 1 completion token); then the
// usual echo.
//
// Requests are checked the way the real APIs check them, in this order:
// path (404), method (405), credentials by presence only (401; a
// non-empty "Authorization: Bearer …" on OpenAI routes, a non-empty
// x-api-key or bearer token on /v1/messages, because anthropic-sdk-go v2
// sends its API key as a bearer token; a key among Options.RevokedKeys is
// refused too, as a revoked one), the x-mock-status header, then the body
// (400 for a body that is not a JSON object, a missing model, or
// stream:true, which the mock does not implement; 413 above 32 MiB).
// Errors have the shape of the route:
// {"error":{"message","type","param","code"}} for OpenAI and
// {"type":"error","error":{"type","message"}} for Anthropic. Only those
// fields are validated, so minimal test bodies work.
//
// # Controlling failures
//
// Per request, with markers anywhere in any string of the body (message
// content, input, prompt):
//
//	[[mock:429]]        answer 429 with Retry-After (any status 400-599 works: [[mock:503]])
//	[[mock:500]]        answer 500
//	[[mock:400]]        answer 400 invalid_request_error
//	[[mock:sleep=1.5s]] wait that long (any Go duration) before answering
//	[[mock:hang]]       never answer; return when the client gives up
//	[[mock:fail=N]]     answer 500 to the first N requests for this row, then succeed
//	[[mock:429x=N]]     the same with 429s
//
// fail=N and 429x=N count requests per row, a row being the sha256 of the
// body's messages, input and prompt only: a retry on a fallback model is
// the same row, and so are two rows with the same text, so give each row
// its own text. A marker the mock does not know is a 400, because a typo
// that silently succeeds would make a test pass for the wrong reason.
// When a body carries several markers of a kind, the highest status, the
// longest sleep and the largest N win.
//
// Per model: a model name ending in -ratelimited always answers 429 and
// one ending in -broken always 500, so relay.yaml can configure a 429
// storm on a whole model. Per request again, the header
// "x-mock-status: 503" forces that status before the body is even checked.
//
// In aggregate, Options.ErrorRate and Options.RateLimitRate answer that
// fraction of requests with 500 and 429, drawn from an RNG seeded with
// Options.Seed: the same sequence of requests gets the same sequence of
// failures (concurrent requests may take the draws in either order).
//
// The order of precedence is: latency, the request checks above (the
// x-mock-status header among them), hang, sleep, then the first of status
// marker, model suffix, fail=N, 429x=N, random rates. A fail=N or 429x=N
// row counts every request that gets that far, even one that fails for
// another reason. Latency runs from the request's arrival, so reading and
// parsing its body take none of it. Latency, sleeps and hangs end when the client gives up;
// such requests are counted with status 499.
//
// Every 429 carries Retry-After in seconds (Options.RetryAfter, default
// 1s). When that is not a whole number of seconds, Retry-After is
// fractional ("0.25") and retry-after-ms carries the milliseconds, which
// both official SDKs prefer.
//
// # Rate limits per key
//
// Options.RPM and Options.TPM limit each API key (the bearer token or
// x-api-key) to that many requests and tokens a minute, in a sliding window
// of Options.RateWindow (default 1m; the limits scale with it, so a 1s
// window admits RPM/60 requests, never less than one). A request's tokens
// are its prompt tokens (counted as for usage) plus its max_tokens
// (max_completion_tokens, max_output_tokens) when it sets one, else the
// reply's output tokens. A request over either limit is answered 429
// (rate_limit_exceeded) with a Retry-After of when it would fit, and is
// not counted in the window; every answer to a limited key carries the
// provider's headers: x-ratelimit-limit-, -remaining- and -reset-requests
// and -tokens on OpenAI routes (reset as "250ms", "6m0s": until the window
// is empty), anthropic-ratelimit-requests-limit, -remaining and -reset
// (an RFC 3339 time) and the -tokens- ones on /v1/messages. Bedrock routes
// are not limited. Changing the limits keeps the windows, so a test can
// halve a provider's limit mid-batch. Options.RevokedKeys are answered 401,
// as a revoked key is. Stats counts requests by key (by_key) and the
// limit's 429s (limited_by_key).
//
// # Provider batches
//
// The providers' own batch APIs, which relay uses for models with
// batch: native, are served too (batchapi.go, msgbatches.go): OpenAI's
// POST /v1/files (purpose batch), GET /v1/files/{id}/content, POST and GET
// /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel, and
// Anthropic's POST and GET /v1/messages/batches, GET
// /v1/messages/batches/{id}, …/cancel and …/results. A provider batch
// ends Options.BatchDelay after it was created (1 s by default): each row
// is then answered as the same request made directly would be, markers
// included, except that a row carrying [[mock:batch_expire]] expires unrun
// (a direct request ignores that marker). A batch cancelled before it ends
// runs no row. Stats counts the rows run inside provider batches
// (batch_rows, by model), the provider batches created and the cancel
// calls; these are not counted as requests.
//
// # Control endpoints
//
//	GET  /mock/stats    {"requests":N,"by_model":{…},"by_path":{…},"by_status":{"200":N,…},"peak_in_flight":{"model":N,…}}
//	GET  /mock/requests {"data":[{"key","model","run","lease_until","start","end","status"},…]} while "record" is on
//	GET  /mock/options  the current options
//	POST /mock/options  merge the given fields into the options; answers the result
//	POST /mock/reset    zero the stats and the fail=N/429x=N counters, re-seed the RNG (204)
//
// peak_in_flight is, per model as the body names it (the upstream name),
// the most requests in flight at once since the last reset, from arrival
// until the answer is written or the client is seen gone: capacity checks
// compare it with max_concurrency.
//
// With "record" on (Options.Record; Server.Requests in Go), every model
// request is kept until the next reset: its row key (the first 16 hex
// digits of the sha256 of its messages, input and prompt, the row of
// fail=N), model, start and end, status, the X-Relay-Run and
// X-Relay-Lease-Until (unix ms) headers relay's executor sends with the
// rows of a chunk run, and the anthropic-beta and anthropic-user-profile-id
// headers of a message batch's rows. `make chaos` reads them to check that no row is
// sent by two runs at once and none after its run's lease.
//
// Options travel as {"latency":"250ms","error_rate":0.1,"rate_limit_rate":0.05,
// "retry_after":"1.5s","seed":7,"batch_delay":"1s","record":false,"rpm":600,"tpm":0,
// "rate_window":"1s","revoked_keys":["sk-old"]}. Durations are Go duration strings, never
// bare numbers, because a number would leave the unit to guess. Fields left
// out keep their value, so a chaos script can turn one knob at a time;
// unknown fields and out-of-range values are a 400.
package mockup
