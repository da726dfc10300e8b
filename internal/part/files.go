package part

import (
	"fmt"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/files"
)

// Files are the parts a batch's chunks committed, from which the finalizer
// makes its output and error files.
type Files struct {
	// Out and Err are the objects of the output and error files, in chunk
	// order, of OutBytes and ErrBytes in all.
	Out, Err           []string
	OutBytes, ErrBytes int64
	// Keep is every part a commit points to, usage parts included.
	Keep map[string]bool
}

// Committed collects the committed parts of batch id's chunks, every one
// of which must be done.
func Committed(id string, chunks []batch.Chunk) (Files, error) {
	p := Files{Keep: map[string]bool{}}
	for _, c := range chunks {
		if c.State != batch.ChunkDone {
			return Files{}, fmt.Errorf("finalize %s: chunk %d is %s", id, c.Index, c.State)
		}
		if c.OutBytes > 0 {
			p.Out = append(p.Out, c.Parts("out"))
			p.OutBytes += c.OutBytes
		}
		if c.ErrBytes > 0 {
			p.Err = append(p.Err, c.Parts("err"))
			p.ErrBytes += c.ErrBytes
		}
		for _, kind := range []string{"out", "err", "usage"} {
			p.Keep[c.Parts(kind)] = true
		}
	}
	return p, nil
}

// OutputFile names a batch's output file (kind "output") or error file
// (kind "error"): its id and filename derive from the batch id, so a second
// finalizer writes the same records (docs/api.md "Output and error files").
func OutputFile(batchID, kind string) (id, filename string) {
	suffix := strings.TrimPrefix(batchID, "batch_")
	idKind := kind
	if kind == "error" {
		idKind = "errors"
	}
	return "file-" + suffix + "-" + idKind, "batch_" + suffix + "_" + kind + ".jsonl"
}

// OutputTTL is how long an output or error file lives from its creation
// when its batch sets no output_expires_after.
const OutputTTL = 30 * 24 * time.Hour

// Records are the records of batch b's output and error files made of
// p's parts, nil for one without lines (OutputFile names them). Made at
// now, they expire the batch's output_expires_after (or OutputTTL) from
// now, as OpenAI anchors it, and never after their parts can go
// (KeptUntil; docs/api.md "Output and error files").
func (p Files) Records(b batch.Batch, now time.Time, partsExpiry time.Duration) [2]*file.File {
	ttl := int64(OutputTTL / time.Second)
	if b.OutputExpiresAfter != nil {
		ttl = *b.OutputExpiresAfter
	}
	exp := min(KeptUntil(b, partsExpiry), now.Unix()+ttl)
	var out [2]*file.File
	for i, kind := range []string{"output", "error"} {
		keys, size := p.Out, p.OutBytes
		if kind == "error" {
			keys, size = p.Err, p.ErrBytes
		}
		if len(keys) == 0 {
			continue
		}
		id, name := OutputFile(b.ID, kind)
		out[i] = &file.File{ID: id, Bytes: size, CreatedAt: now.Unix(), Filename: name, Purpose: files.PurposeBatchOutput,
			Status: files.StatusProcessed, ExpiresAt: &exp, Tenant: b.Tenant, Objects: keys}
	}
	return out
}

// DeadLetterMessage is the error of a dead-lettered row.
const DeadLetterMessage = "the request's chunk failed on every attempt (executor crash or timeout) and was moved to the dead-letter queue"

// InputChanged are the lines of chunk c of batch b when its input object
// was replaced after the plan: every row fails with input_file_changed,
// its custom id unknown (the range is not read), and the batch ends failed
// (batch.FinalStatus).
func InputChanged(b batch.Batch, c batch.Chunk, now time.Time) *Lines {
	return notRun(b, c, now, batch.CodeInputChanged, "the batch's input file changed after it was validated; this request was not run")
}

// InputMissing is chunk c's lines when its input object is gone: an
// input_file_missing error line per row.
func InputMissing(b batch.Batch, c batch.Chunk, now time.Time) *Lines {
	return notRun(b, c, now, batch.CodeInputMissing, "the batch's input file is gone; this request was not run")
}

// notRun is chunk c's lines, each row's an error line of code.
func notRun(b batch.Batch, c batch.Chunk, now time.Time, code, message string) *Lines {
	l := NewLines(b, c, now)
	for i := range c.Rows {
		l.Set(i, Outcome{Code: code, Message: message})
	}
	return l
}
