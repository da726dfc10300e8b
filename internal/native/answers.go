package native

import (
	"encoding/json"
	"fmt"

	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/spool"
)

// answersInMemory is what answers keep in memory: a provider batch's
// answers are read once more each, so memory saves little, and the
// chunks' lines (part.Lines) keep their own.
const answersInMemory = 1 << 20

// answers are the rows' answers of a provider batch, by row, in a spool:
// an import holds one at a time (docs/design.md "Memory").
type answers struct {
	spool spool.Buffer
	at    map[int]answerAt
}

// answerAt is where a row's answer is in the spool: the result without
// its body, as JSON, then the body.
type answerAt struct {
	off        int64
	meta, body int64
}

// put spools row's answer; a row answered twice keeps its last.
func (a *answers) put(row int, res inference.Result) error {
	body := res.Body
	res.Body = nil
	meta, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("spool the answer of row %d: %w", row, err)
	}
	at := answerAt{off: a.spool.Size(), meta: int64(len(meta)), body: int64(len(body))}
	if _, err := a.spool.Write(meta); err != nil {
		return fmt.Errorf("spool the answer of row %d: %w", row, err)
	}
	if _, err := a.spool.Write(body); err != nil {
		return fmt.Errorf("spool the answer of row %d: %w", row, err)
	}
	a.at[row] = at
	return nil
}

// get reads row's answer back; false when the provider batch gave none.
func (a *answers) get(row int) (inference.Result, bool, error) {
	at, ok := a.at[row]
	if !ok {
		return inference.Result{}, false, nil
	}
	data, err := a.spool.Bytes(at.off, at.meta+at.body)
	if err != nil {
		return inference.Result{}, false, fmt.Errorf("read the answer of row %d back: %w", row, err)
	}
	var res inference.Result
	if err := json.Unmarshal(data[:at.meta], &res); err != nil {
		return inference.Result{}, false, fmt.Errorf("read the answer of row %d back: %w", row, err)
	}
	if at.body > 0 {
		res.Body = data[at.meta:]
	}
	return res, true, nil
}
