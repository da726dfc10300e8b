package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
)

// The client commands (relay batch …, relay files …) talk to the public API
// through the official openai-go client, Relay's extensions (retry, results,
// presigned uploads, extra fields) through its generic calls: this file holds
// what they share — where the API is and which key to use, the client, and
// errors that say what to do.

const (
	defaultAPIURL = "http://127.0.0.1:8080/v1"
	missingKeyMsg = "set RELAY_API_KEY (or OPENAI_API_KEY) to a key from `relay keys create` or the one `make dev` printed"
)

// cli is what a client command runs with. Tests build one with a fake
// environment and fast polling; runBatch and runFiles use newCLI.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// tty says stderr is a terminal, so waiting draws a progress bar
	// instead of printing periodic lines.
	tty              bool
	pollMin, pollMax time.Duration
	now              func() time.Time
}

func newCLI(stdout, stderr io.Writer) *cli {
	return &cli{
		stdout: stdout, stderr: stderr, getenv: os.Getenv, tty: isTerminal(stderr),
		pollMin: time.Second, pollMax: 5 * time.Second, now: time.Now,
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// newFlagSet returns the flags of one command, relay name synopsis. It
// prints nothing itself: parseArgs prints its usage, to stdout when asked
// for with -h or --help and to stderr after a mistake.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: relay %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags wherever they sit among the arguments
// (relay batch submit a.jsonl --wait) and returns the other arguments.
// -h and --help print the usage on stdout and give flag.ErrHelp; any other
// mistake prints it on stderr and is a usage error.
func parseArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, error) {
	var rest []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			printUsage(fs, stdout)
			return nil, err
		case err != nil:
			printUsage(fs, stderr)
			return nil, exitError{2, err}
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if n := len(args) - len(left); n > 0 && args[n-1] == "--" {
			return append(rest, left...), nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}

func printUsage(fs *flag.FlagSet, w io.Writer) {
	fs.SetOutput(w)
	fs.Usage()
	fs.SetOutput(io.Discard)
}

// parseArgs parses a client command's flags (see parseArgs).
func (c *cli) parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	return parseArgs(fs, args, c.stdout, c.stderr)
}

// helpIsSuccess turns the -h of a command (usage already printed) into success.
func helpIsSuccess(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// connFlags override the environment's URL and key.
type connFlags struct{ url, key string }

func (cf *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&cf.url, "url", "", "API base URL (default $RELAY_URL, else $OPENAI_BASE_URL, else "+defaultAPIURL+")")
	fs.StringVar(&cf.key, "key", "", "API key (default $RELAY_API_KEY, else $OPENAI_API_KEY)")
}

type clientConfig struct {
	baseURL string // ends in /v1
	key     string
}

// resolveConfig picks the URL and key: flags, then RELAY_*, then the
// OpenAI SDK's variables. Mistakes are usage errors (exit 2).
func resolveConfig(getenv func(string) string, cf connFlags) (clientConfig, error) {
	base, err := normalizeBaseURL(firstSet(cf.url, getenv("RELAY_URL"), getenv("OPENAI_BASE_URL"), defaultAPIURL))
	if err != nil {
		return clientConfig{}, exitError{2, err}
	}
	key := firstSet(cf.key, getenv("RELAY_API_KEY"), getenv("OPENAI_API_KEY"))
	if key == "" {
		return clientConfig{}, exitError{2, errors.New(missingKeyMsg)}
	}
	return clientConfig{baseURL: base, key: key}, nil
}

func firstSet(vs ...string) string {
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// normalizeBaseURL accepts the URL with or without its /v1 (and without a
// scheme) and returns it ending in /v1, as the OpenAI SDKs expect it.
func normalizeBaseURL(raw string) (string, error) {
	s := raw
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("API URL %q: want http(s)://HOST[:PORT][/v1] (RELAY_URL or --url)", raw)
	}
	u.RawQuery, u.Fragment, u.RawPath = "", "", ""
	u.Path = strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/v1") {
		u.Path += "/v1"
	}
	return u.String(), nil
}

// apiClient is the OpenAI SDK's client on the public API. Its middleware
// (answers) turns an answer that is not 2xx into an *apiError and a request
// that got none into a *netError, before the SDK reads them, so every
// command reports errors alike. Presigned PUTs go to the object store, not
// the API: they take http, the plain client beneath the SDK's.
type apiClient struct {
	base string
	oai  openai.Client
	http *http.Client
}

func (c *cli) connect(cf connFlags) (*apiClient, error) {
	cfg, err := resolveConfig(c.getenv, cf)
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// A body can take long to send or to stream back, but a server that
	// says nothing for minutes after a request is not going to.
	t.ResponseHeaderTimeout = 2 * time.Minute
	cl := &apiClient{base: cfg.baseURL, http: &http.Client{Transport: t}}
	// No retries: waiting polls again by itself (maxPollFailures), and any
	// other command says what failed at once.
	cl.oai = openai.NewClient(option.WithBaseURL(cfg.baseURL+"/"), option.WithAPIKey(cfg.key),
		option.WithHTTPClient(cl.http), option.WithMaxRetries(0), option.WithMiddleware(cl.answers))
	return cl, nil
}

// answers passes on a 2xx answer and turns anything else into the error
// the CLI reports: a *netError for no answer, an *apiError for another.
func (c *apiClient) answers(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &netError{base: c.base, err: err}
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, c.errorOf(resp)
}

// apiError is an error answer of the API: its message, and what to do.
type apiError struct {
	Status  int
	Message string
	Code    string
	Hint    string
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
	if e.Hint != "" {
		s += "\n  " + e.Hint
	}
	return s
}

// netError is a request that got no answer.
type netError struct {
	base string
	err  error
}

func (e *netError) Error() string {
	if errors.Is(e.err, syscall.ECONNREFUSED) {
		return fmt.Sprintf("cannot connect to %s: is `make dev` running at %s? (or set RELAY_URL to where the API is)", e.base, e.base)
	}
	return fmt.Sprintf("cannot reach the API at %s: %v", e.base, e.err)
}

func (e *netError) Unwrap() error { return e.err }

// transient says whether trying the same request again later may work.
func transient(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusTooManyRequests || ae.Status >= 500
	}
	var ne *netError
	return errors.As(err, &ne)
}

// withHint replaces the generic advice of an API error with status by one
// that knows what the caller asked for.
func withHint(err error, status int, hint string) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == status && ae.Code != "unknown_route" {
		ae.Hint = hint
	}
	return err
}

func (c *apiClient) errorOf(resp *http.Response) *apiError {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	e := &apiError{Status: resp.StatusCode}
	if json.Unmarshal(raw, &body) == nil && body.Error.Message != "" {
		e.Message, e.Code = body.Error.Message, body.Error.Code
	} else {
		e.Message = http.StatusText(resp.StatusCode)
		if s := strings.TrimSpace(string(raw)); s != "" {
			e.Message += ": " + truncate(s, 200)
		}
	}
	switch {
	case e.Code == "unknown_route":
		e.Hint = fmt.Sprintf("check that %s (RELAY_URL or --url) is a Relay Batch API", c.base)
	case e.Status == http.StatusUnauthorized:
		e.Hint = "check the key (RELAY_API_KEY, OPENAI_API_KEY or --key): `relay keys create --tenant NAME` makes one"
	case e.Status == http.StatusForbidden:
		e.Hint = "the key lacks a scope: make one with `relay keys create --tenant NAME --scopes files,batches`"
	case e.Status == http.StatusNotFound:
		e.Hint = "check the id"
	case e.Status == http.StatusRequestEntityTooLarge:
		e.Hint = "the file was too big for one request; relay splits files into parts of at most 4 MiB, so the server's limit is lower than that"
	case e.Status == http.StatusTooManyRequests:
		e.Hint = "rate limited: wait a little and try again"
	case e.Status >= 500:
		e.Hint = "the server failed: try again, and look at its log if it keeps failing"
	}
	return e
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// printJSON writes an API answer as it came, one value per line.
func printJSON(w io.Writer, raw string) error {
	_, err := fmt.Fprintln(w, strings.TrimSpace(raw))
	return err
}

// extra decodes field name into v: one of the Relay extensions, which
// openai-go keeps as an object's extra fields (and marks not Valid, as
// fields it does not know); v is left as it is when the field is missing,
// null or of another type.
func extra(fields map[string]respjson.Field, name string, v any) {
	if raw := fields[name].Raw(); raw != "" {
		_ = json.Unmarshal([]byte(raw), v)
	}
}

// save streams r to the file out (through a temporary file, so a broken
// download never leaves a complete-looking file), or to stdout when out
// is "" or "-".
func (c *cli) save(r io.Reader, out string) error {
	if out == "" || out == "-" {
		_, err := io.Copy(c.stdout, r)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "wrote %s (%d bytes)\n", out, n)
	return nil
}

func unixTime(sec int64) string {
	if sec == 0 {
		return ""
	}
	return time.Unix(sec, 0).UTC().Format(time.RFC3339)
}
