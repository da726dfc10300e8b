package app

import (
	"context"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// The attributes LambdaLogHandler adds.
const (
	requestIDKey = "request_id"
	functionKey  = "function"
)

// LambdaLogHandler wraps h so that a record logged with a context (the
// *Context methods: InfoContext, ErrorContext, …) inside a Lambda invocation
// carries the invocation's request id as request_id and the function's name
// as function, both from lambdacontext.FromContext. The local runtime puts
// the same Lambda context into each invocation's ctx, so its lines carry
// them too. A record logged without a context (Info, Error, …), or with one
// that holds no Lambda context, passes unchanged.
//
// A key the record already has, or that the logger was given with With,
// is not added again: the api's "request failed" line keeps its own
// request_id (the API request's), and a logger made with
// .With("request_id", …), as the local runtime's event-source mapping
// makes, gets no second one. Under a group (WithGroup) the attributes go
// into the group, like every other attribute of the record; nothing in the
// service logs under one.
//
// Wrapping a handler that is already one returns it as it is.
func LambdaLogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(*lambdaLogHandler); ok {
		return h
	}
	return &lambdaLogHandler{inner: h}
}

type lambdaLogHandler struct {
	inner slog.Handler
	// hasRequestID and hasFunction: the logger's own attributes (With)
	// have these keys.
	hasRequestID, hasFunction bool
}

func (h *lambdaLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *lambdaLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(attrs)
	for _, a := range attrs {
		switch a.Key {
		case requestIDKey:
			c.hasRequestID = true
		case functionKey:
			c.hasFunction = true
		}
	}
	return &c
}

func (h *lambdaLogHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	return &c
}

func (h *lambdaLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil {
		return h.inner.Handle(ctx, r)
	}
	lc, ok := lambdacontext.FromContext(ctx)
	if !ok || lc == nil {
		return h.inner.Handle(ctx, r)
	}
	id := ""
	if !h.hasRequestID {
		id = lc.AwsRequestID
	}
	fn := ""
	if !h.hasFunction {
		fn = functionName(lc)
	}
	if id == "" && fn == "" {
		return h.inner.Handle(ctx, r)
	}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case requestIDKey:
			id = ""
		case functionKey:
			fn = ""
		}
		return true
	})
	if id == "" && fn == "" {
		return h.inner.Handle(ctx, r)
	}
	r = r.Clone() // the caller's record is not ours to add to
	if id != "" {
		r.AddAttrs(slog.String(requestIDKey, id))
	}
	if fn != "" {
		r.AddAttrs(slog.String(functionKey, fn))
	}
	return h.inner.Handle(ctx, r)
}

// functionName is the name in the invoked function's ARN
// (arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER]), else the one
// the Lambda environment gives (AWS_LAMBDA_FUNCTION_NAME).
func functionName(lc *lambdacontext.LambdaContext) string {
	if parts := strings.Split(lc.InvokedFunctionArn, ":"); len(parts) >= 7 && parts[5] == "function" {
		return parts[6]
	}
	return lambdacontext.FunctionName
}
