package mockup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

func (s *Server) controlRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /mock/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Stats())
	})
	mux.HandleFunc("GET /mock/requests", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"data": s.Requests()})
	})
	mux.HandleFunc("GET /mock/options", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.options())
	})
	mux.HandleFunc("POST /mock/options", func(w http.ResponseWriter, r *http.Request) {
		o := s.options() // decoding over the current options merges
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&o); err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody(shapeOpenAI, http.StatusBadRequest, "mock options: "+err.Error(), ""))
			return
		}
		s.SetOptions(o)
		writeJSON(w, http.StatusOK, s.options())
	})
	mux.HandleFunc("POST /mock/reset", func(w http.ResponseWriter, r *http.Request) {
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// optionsJSON is the wire form of Options: durations as Go duration
// strings, because a bare number would leave the unit to guess.
type optionsJSON struct {
	Latency       string   `json:"latency"`
	ErrorRate     float64  `json:"error_rate"`
	RateLimitRate float64  `json:"rate_limit_rate"`
	RetryAfter    string   `json:"retry_after"`
	Seed          int64    `json:"seed"`
	Region        string   `json:"region"`
	BatchDelay    string   `json:"batch_delay"`
	Record        bool     `json:"record"`
	RPM           int      `json:"rpm"`
	TPM           int      `json:"tpm"`
	RateWindow    string   `json:"rate_window"`
	RevokedKeys   []string `json:"revoked_keys"`
}

// wire is o in the wire form described on the package.
func (o Options) wire() optionsJSON {
	return optionsJSON{
		Latency:       o.Latency.String(),
		ErrorRate:     o.ErrorRate,
		RateLimitRate: o.RateLimitRate,
		RetryAfter:    o.RetryAfter.String(),
		Seed:          o.Seed,
		Region:        o.Region,
		BatchDelay:    o.BatchDelay.String(),
		Record:        o.Record,
		RPM:           o.RPM,
		TPM:           o.TPM,
		RateWindow:    o.RateWindow.String(),
		RevokedKeys:   o.RevokedKeys,
	}
}

// MarshalJSON writes the wire form.
func (o Options) MarshalJSON() ([]byte, error) {
	return json.Marshal(o.wire())
}

// UnmarshalJSON reads the wire form. Fields left out keep the value o
// already has, and anything malformed is an error rather than clamped,
// because over HTTP the caller can be told.
func (o *Options) UnmarshalJSON(b []byte) error {
	j := o.wire()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	latency, err1 := parseDuration("latency", j.Latency)
	retryAfter, err2 := parseDuration("retry_after", j.RetryAfter)
	batchDelay, err3 := parseDuration("batch_delay", j.BatchDelay)
	window, err4 := parseDuration("rate_window", j.RateWindow)
	var err5 error
	if j.RPM < 0 || j.TPM < 0 {
		err5 = fmt.Errorf("rpm, tpm: %d, %d are not both non-negative", j.RPM, j.TPM)
	}
	if err := errors.Join(err1, err2, err3, err4, err5, checkRate("error_rate", j.ErrorRate), checkRate("rate_limit_rate", j.RateLimitRate)); err != nil {
		return err
	}
	*o = Options{Latency: latency, ErrorRate: j.ErrorRate, RateLimitRate: j.RateLimitRate, RetryAfter: retryAfter, Seed: j.Seed, Region: j.Region, BatchDelay: batchDelay, Record: j.Record,
		RPM: j.RPM, TPM: j.TPM, RateWindow: window, RevokedKeys: j.RevokedKeys}
	return nil
}

func parseDuration(field, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s: %q is not a non-negative Go duration such as \"250ms\"", field, v)
	}
	return d, nil
}

func checkRate(field string, v float64) error {
	if v < 0 || v > 1 {
		return fmt.Errorf("%s: %v is not a fraction between 0 and 1", field, v)
	}
	return nil
}
