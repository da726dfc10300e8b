package mockup

import (
	"net/http"
	"strconv"

	"github.com/relaybatch/relay/internal/anthropic/wire"
	"github.com/relaybatch/relay/internal/endpoint"
)

// errorBody is the one place an error becomes a body, in the shape the
// route's official SDK expects.
func errorBody(sh shape, status int, message, param string) object {
	if sh == shapeBedrock {
		return object{"message": message}
	}
	if sh == shapeAnthropic {
		return object{
			"type":  "error",
			"error": object{"type": wire.ErrorType(status), "message": message},
		}
	}
	var p, code any // null unless known, as OpenAI sends them
	if param != "" {
		p = param
	}
	if status == http.StatusTooManyRequests {
		code = "rate_limit_exceeded"
	}
	return object{"error": object{"message": message, "type": endpoint.OpenAIErrorType(status), "param": p, "code": code}}
}

func statusMessage(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "Rate limit reached for requests"
	case http.StatusInternalServerError:
		return "The server had an error while processing your request. Sorry about that!"
	case 529:
		return "Overloaded"
	}
	return http.StatusText(status)
}

// awsErrorType is the exception Bedrock names (x-amzn-ErrorType) for a status.
func awsErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "ValidationException"
	case http.StatusForbidden:
		return "AccessDeniedException"
	case http.StatusNotFound:
		return "ResourceNotFoundException"
	case http.StatusRequestTimeout:
		return "ModelTimeoutException"
	case http.StatusTooManyRequests:
		return "ThrottlingException"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableException"
	}
	if status >= 500 {
		return "InternalServerException"
	}
	return "ValidationException"
}

// setBedrockHeaders adds what Bedrock's runtime answers with: its request
// id, the exception of an error, the token counts of a success.
func setBedrockHeaders(h http.Header, req *request, out outcome) {
	h.Set("x-amzn-RequestId", req.id())
	if out.status >= 400 {
		typ := out.awsType
		if typ == "" {
			typ = awsErrorType(out.status)
		}
		h.Set("x-amzn-ErrorType", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
		return
	}
	usage, _ := out.body["usage"].(object)
	for header, keys := range map[string][]string{
		"X-Amzn-Bedrock-Input-Token-Count":  {"input_tokens", "prompt_tokens"},
		"X-Amzn-Bedrock-Output-Token-Count": {"output_tokens", "completion_tokens"},
	} {
		for _, k := range keys {
			if n, ok := usage[k].(int); ok {
				h.Set(header, strconv.Itoa(n))
			}
		}
	}
}
