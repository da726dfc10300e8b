package mockup

import (
	"net/http"

	"github.com/relaybatch/relay/internal/anthropic/wire"
)

// errorBody is the one place an error becomes a body, in the shape the
// route's official SDK expects.
func errorBody(sh shape, status int, message, param string) object {
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
	return object{"error": object{"message": message, "type": openAIErrorType(status), "param": p, "code": code}}
}

func openAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
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
