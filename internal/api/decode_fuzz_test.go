package api

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/relaybatch/relay/internal/errs"
)

// checkDecodeErr: a decoder either accepts its input or answers a client
// error (400/413) — never a panic, never an internal error.
func checkDecodeErr(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var e *errs.Error
	if !errors.As(err, &e) || (e.Kind != errs.Invalid && e.Kind != errs.TooLarge) {
		t.Fatalf("decoder error %v (%T) is not a client error", err, err)
	}
	if e.Message == "" {
		t.Fatal("client error without a message")
	}
}

func FuzzDecodeCreate(f *testing.F) {
	f.Add([]byte(`{"input_file_id":"file-abc","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"a":"b"}}`))
	f.Add([]byte(`{"requests":[{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}],"priority":3}`))
	f.Add([]byte(`{"input_file_id":5}`))
	f.Add([]byte(`{"output_expires_after":{"anchor":"created_at","seconds":3600},"schedule":"* * * * *"}`))
	f.Add([]byte(`[1,2`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, err := decodeCreate(body)
		checkDecodeErr(t, err)
	})
}

func FuzzDecodeJSONBodies(f *testing.F) {
	f.Add(uint8(0), []byte(`{"filename":"a.jsonl","purpose":"batch","bytes":10}`))
	f.Add(uint8(1), []byte(`{"filename":"a.jsonl","purpose":"batch","bytes":10,"mime_type":"text/jsonl","expires_after":{"anchor":"created_at","seconds":3600}}`))
	f.Add(uint8(2), []byte(`{"part_ids":["part_a","part_b"]}`))
	f.Add(uint8(2), []byte(`{"part_ids":"nope"}`))
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		var err error
		switch which % 3 {
		case 0:
			var v presignRequest
			err = unmarshal(body, &v)
		case 1:
			var v uploadRequest
			if err = unmarshal(body, &v); err == nil {
				_, err = v.ExpiresAfter.seconds("expires_after")
			}
		case 2:
			var v completeRequest
			err = unmarshal(body, &v)
		}
		checkDecodeErr(t, err)
	})
}

func FuzzReadForm(f *testing.F) {
	f.Add("xyz", []byte("--xyz\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n{}\n\r\n--xyz--\r\n"))
	f.Add("b", []byte("--b\r\nnot a part"))
	f.Add("", []byte(""))
	f.Fuzz(func(t *testing.T, boundary string, body []byte) {
		r := httptest.NewRequest("POST", "/v1/files", bytes.NewReader(body))
		r.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
		form, err := readForm(r, "file")
		checkDecodeErr(t, err)
		if err == nil {
			if len(form.data) > 4<<20 {
				t.Fatalf("accepted %d bytes of file data", len(form.data))
			}
			if _, err := expiresAfter(form.fields); err != nil {
				checkDecodeErr(t, err)
			}
		}
	})
}
