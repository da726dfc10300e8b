package jsonl

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// A simple row (docs/api.md "Files", simple rows) is a JSONL line
// {"custom_id"?, "messages"} or {"custom_id"?, "prompt"} without a body: a
// chat completion for the batch's model (Options.Model). A prompt is one
// user message. custom_id defaults to row-<n>, n counting rows from 1, as
// in a one-column CSV file. Its Row.JSON is the normalized request, so a
// file holding one is planned as a CSV file is: rewritten as normalized
// JSONL.

// simpleMembers are the only members a simple row may have.
const simpleMembers = "custom_id, messages or prompt"

// checkSimple validates a simple row and returns it with its normalized
// request.
func (s *scanner) checkSimple(l line, req rawRequest) (Row, *LineError) {
	n := l.num
	if bad := s.checkSimpleShape(n, req); bad != nil {
		return Row{}, bad
	}
	model, bad := s.simpleModel(n)
	if bad != nil {
		return Row{}, bad
	}
	id, bad := s.simpleID(n, req.customID)
	if bad != nil {
		return Row{}, bad
	}
	var js []byte
	if req.prompt != nil {
		prompt, _ := stringValue(req.prompt)
		js = s.simple.prompt(model, id, string(prompt))
	} else {
		js = s.simple.messages(model, id, req.messages)
	}
	return Row{Line: n, Start: l.start, End: l.end, CustomID: id, Model: model, JSON: js, Body: bodyOf(js)}, nil
}

// checkSimpleShape checks the members of a simple row: custom_id and one
// of messages, a non-empty array of objects, or prompt, a non-blank
// string.
func (s *scanner) checkSimpleShape(n int, req rawRequest) *LineError {
	other := req.other
	switch {
	case other != nil:
	case req.method != nil:
		other = []byte("method")
	case req.url != nil:
		other = []byte("url")
	}
	switch {
	case other != nil:
		return problem(n, CodeInvalidRow, string(other), "a row of messages or prompt takes only %s, not %q: other request parameters go in a row with a body", simpleMembers, other)
	case req.messages != nil && req.prompt != nil:
		return problem(n, CodeInvalidRow, "prompt", "send messages or prompt, not both")
	case req.prompt != nil:
		p, ok := stringValue(req.prompt)
		if !ok {
			return problem(n, CodeInvalidPrompt, "prompt", "prompt must be a string, not %s", clip(req.prompt))
		}
		if strings.TrimSpace(string(p)) == "" {
			return problem(n, CodeEmptyPrompt, "prompt", "the prompt is empty")
		}
		return nil
	}
	var msgs []json.RawMessage
	if json.Unmarshal(req.messages, &msgs) != nil || len(msgs) == 0 {
		return problem(n, CodeInvalidMessages, "messages", "messages must be a non-empty array of message objects, not %s", clip(req.messages))
	}
	for i, m := range msgs {
		if !isObject(m) {
			return problem(n, CodeInvalidMessages, "messages["+strconv.Itoa(i)+"]", "messages[%d] must be a message object such as {\"role\":\"user\",\"content\":\"…\"}, not %s", i, clip(m))
		}
	}
	return nil
}

// simpleModel is the model of a simple row: the batch's, on the chat
// completions endpoint.
func (s *scanner) simpleModel(n int) (string, *LineError) {
	o := s.opts
	switch {
	case o.Endpoint != chatCompletions:
		return "", problem(n, CodeUnsupportedEndpoint, "endpoint", "a row of messages or prompt is a chat completion: use endpoint %s, not %s", chatCompletions, o.Endpoint)
	case o.Model == "":
		return "", problem(n, CodeMissingModel, "model", "a row of messages or prompt needs the batch's model")
	}
	model, known := s.knownModel([]byte(o.Model))
	switch {
	case !known:
		return "", problem(n, CodeModelNotFound, "model", "model %q is not a configured model (GET /v1/models lists them)", model)
	case !s.lastAllowed:
		return "", problem(n, CodeModelNotAllowed, "model", "model %q is not one this API key may use", model)
	}
	return model, nil
}

// simpleID is a simple row's custom_id, row-<n> when it has none.
func (s *scanner) simpleID(n int, raw []byte) (string, *LineError) {
	id := "row-" + strconv.Itoa(s.res.Rows)
	if !isNull(raw) {
		v, ok := stringValue(raw)
		switch {
		case !ok:
			return "", problem(n, CodeInvalidCustomID, "custom_id", "custom_id must be a string, not %s", clip(raw))
		case len(v) == 0:
			return "", problem(n, CodeMissingCustomID, "custom_id", "custom_id is empty: leave it out to get %s", id)
		}
		id = string(v)
	}
	if first := s.useID([]byte(id), n); first != 0 {
		return "", problem(n, CodeDuplicateCustomID, "custom_id", "custom_id %q is already used on line %d", clip([]byte(id)), first)
	}
	return id, nil
}

// simpleEncoder writes the normalized requests of simple rows.
type simpleEncoder struct {
	chat *chatEncoder // prompts, as CSV records are
	buf  bytes.Buffer
}

// prompt returns the request of a prompt row, valid until the next call.
func (e *simpleEncoder) prompt(model, id, prompt string) []byte {
	if e.chat == nil || e.chat.req.Body.Model != model {
		e.chat = newChatEncoder(model)
	}
	return e.chat.encode(id, prompt)
}

// messages returns the request of a messages row, its messages as they
// were sent, valid until the next call.
func (e *simpleEncoder) messages(model, id string, messages []byte) []byte {
	q := func(v string) []byte { b, _ := json.Marshal(v); return b } // strings only: cannot fail
	e.buf.Reset()
	e.buf.WriteString(`{"custom_id":`)
	e.buf.Write(q(id))
	e.buf.WriteString(`,"method":"POST","url":`)
	e.buf.Write(q(chatCompletions))
	e.buf.WriteString(`,"body":{"model":`)
	e.buf.Write(q(model))
	e.buf.WriteString(`,"messages":`)
	e.buf.Write(messages)
	e.buf.WriteString(`}}`)
	return e.buf.Bytes()
}
