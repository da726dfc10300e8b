package emulator_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/relaybatch/relay/internal/local/emulator"
)

func TestStartServesSQS(t *testing.T) {
	endpoint, stop, err := emulator.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cfg, err := emulator.Config(t.Context(), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqs.NewFromConfig(cfg).ListQueues(t.Context(), &sqs.ListQueuesInput{}); err != nil {
		t.Errorf("ListQueues on %s: %v", endpoint, err)
	}
	stop()
	stop() // idempotent, so callers can both defer it and call it
}

func TestStartUsesAWSEndpointURL(t *testing.T) {
	const want = "http://127.0.0.1:1"
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
