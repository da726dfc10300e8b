package emulator_test

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
)

func TestStartServesSQS(t *testing.T) {
	cfg, stop := start(t)
	if _, err := sqs.NewFromConfig(cfg).ListQueues(t.Context(), &sqs.ListQueuesInput{}); err != nil {
		t.Errorf("ListQueues: %v", err)
	}
	stop()
	stop() // idempotent, so callers can both defer it and call it
}

// start starts the emulator (or finds the one AWS_ENDPOINT_URL names)
// for a test that needs it, and returns a config for it and its stop,
// which the test's end calls too.
func start(t *testing.T) (aws.Config, func()) {
	t.Helper()
	emutest.Require(t)
	endpoint, stop, err := emulator.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	cfg, err := emulator.Config(t.Context(), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, stop
}

func TestStartUsesAWSEndpointURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	want := srv.URL
	t.Setenv("AWS_ENDPOINT_URL", want)
	got, stop, err := emulator.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if got != want {
		t.Errorf("endpoint = %q, want %q", got, want)
	}
}

// A stale AWS_ENDPOINT_URL (the emulator it named is gone) is an error
// that names the variable, not a connection refused later on.
func TestStartOnStaleAWSEndpointURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	stale := srv.URL
	srv.Close()
	t.Setenv("AWS_ENDPOINT_URL", stale)
	_, _, err := emulator.StartOn(t.Context(), emulator.DefaultPort)
	if err == nil || !strings.Contains(err.Error(), "AWS_ENDPOINT_URL="+stale) || !strings.Contains(err.Error(), "unset AWS_ENDPOINT_URL") {
		t.Fatalf("err = %v, want one naming AWS_ENDPOINT_URL=%s and saying to unset it", err, stale)
	}
}

// Something answering on the port make dev would start its emulator on
// (a killed run's emulator) is not silently reused.
func TestStartOnPortTaken(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "")
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	port, _ := strconv.Atoi(srv.URL[strings.LastIndex(srv.URL, ":")+1:])
	_, stop, err := emulator.StartOn(t.Context(), port)
	if err == nil {
		stop()
		t.Fatalf("StartOn reused what answers on %s", srv.URL)
	}
	if !strings.Contains(err.Error(), "already answers on "+srv.URL) {
		t.Fatalf("err = %v, want it to say something answers on %s", err, srv.URL)
	}
}
