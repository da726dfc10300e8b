package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/relaybatch/relay/internal/quote"
)

// batchQuote uploads FILE as batch submit would, asks for a quote of a
// batch of it (a create with dry_run: docs/api.md "Quotes"), prints it and
// deletes the upload: nothing is left behind and nothing runs.
func (c *cli) batchQuote(ctx context.Context, args []string) error {
	fs := newFlagSet("batch quote", "FILE [flags]")
	var cf connFlags
	cf.register(fs)
	var endpoint, window, model string
	fs.StringVar(&model, "model", "", "the model of every row: sets (overrides) body.model of every JSONL row; required for CSV files")
	fs.StringVar(&endpoint, "endpoint", "/v1/chat/completions", "the endpoint of every row")
	fs.StringVar(&window, "completion-window", "24h", "how long the batch may run, 1h to 24h")
	asJSON := fs.Bool("json", false, "print the API's quote JSON")
	paths, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(paths) != 1 {
		return usageErr("batch quote: give one FILE (.jsonl or .csv)")
	}
	if strings.EqualFold(filepath.Ext(paths[0]), ".csv") && model == "" {
		return usageErr("batch quote: %s is CSV: pass --model M, the model every row uses", paths[0])
	}
	cl, err := c.connect(cf)
	if err != nil {
		return err
	}
	f, err := c.uploadInput(ctx, cl, paths[0], model)
	if err != nil {
		return err
	}
	defer func() {
		if _, err := cl.oai.Files.Delete(context.WithoutCancel(ctx), f.ID); err != nil {
			fmt.Fprintf(c.stderr, "relay: delete the quoted upload %s: %v\n", f.ID, err)
		}
	}()
	body := map[string]any{"input_file_id": f.ID, "endpoint": endpoint, "completion_window": window, "dry_run": true}
	if model != "" {
		body["model"] = model
	}
	var raw json.RawMessage
	if err := cl.oai.Post(ctx, "batches", body, &raw); err != nil {
		return fmt.Errorf("quote %s: %w", paths[0], err)
	}
	if *asJSON {
		return printJSON(c.stdout, string(raw))
	}
	var q quote.Quote
	if err := json.Unmarshal(raw, &q); err != nil {
		return fmt.Errorf("quote %s: %w", paths[0], err)
	}
	return printQuote(c.stdout, q)
}

// printQuote writes a quote for people: its rows and tokens by model, then
// cost and duration by mode.
func printQuote(w io.Writer, q quote.Quote) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tROWS\tINPUT TOKENS\tTOKENIZER\tMAX OUTPUT\tBATCH\tLATENCY\tQUEUED ROWS")
	for _, m := range q.Models {
		maxOut := fmt.Sprint(m.MaxOutputTokens)
		if m.RowsWithoutMaxTokens > 0 {
			maxOut += fmt.Sprintf(" (%d rows unbounded)", m.RowsWithoutMaxTokens)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s (%s)\t%d\n", m.Model, m.Rows, m.InputTokens, m.Tokenizer, maxOut, m.Batch,
			seconds(m.LatencySeconds), m.LatencySource, m.QueuedRows)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "MODE\tCOST (USD)\tDURATION")
	for _, mode := range []struct {
		name string
		m    quote.Mode
	}{{"direct", q.Modes.Direct}, {"native", q.Modes.Native}, {"hybrid", q.Modes.Hybrid}} {
		cost := "unknown (a model has no price)"
		if r := mode.m.CostUSD; r != nil {
			cost = fmt.Sprintf("%.6f to ", r.Min)
			if r.Max != nil {
				cost += fmt.Sprintf("%.6f", *r.Max)
			} else {
				cost += "unbounded (rows without max_tokens)"
			}
		}
		dur := "up to " + seconds(mode.m.MaxDurationSeconds)
		if d := mode.m.DurationSeconds; d != nil {
			dur = "about " + seconds(*d)
		}
		name := mode.name
		if name == q.Execution {
			name += " (this batch)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, cost, dur)
	}
	return tw.Flush()
}

// seconds writes a duration in seconds for people.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}
