package localstack

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/store"
)

// relayDev is a `relay dev` process against the emulator outside it.
type relayDev struct {
	cmd      *exec.Cmd
	url, key string
}

// startRelayDev runs bin as `relay dev` with env (and more flags) and
// waits for its banner.
func startRelayDev(t *testing.T, bin string, env []string, flags ...string) *relayDev {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dev", "--tenant", "acme"}, flags...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = nil
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Its own process group, so a SIGKILL takes nothing else with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	d := &relayDev{cmd: cmd}
	urlRe, keyRe := regexp.MustCompile(`API URL:\s+(\S+)/v1`), regexp.MustCompile(`API key:\s+(\S+)`)
	sc := bufio.NewScanner(out)
	for sc.Scan() && (d.url == "" || d.key == "") {
		if m := urlRe.FindStringSubmatch(sc.Text()); m != nil {
			d.url = m[1]
		}
		if m := keyRe.FindStringSubmatch(sc.Text()); m != nil {
			d.key = m[1]
		}
	}
	if d.url == "" || d.key == "" {
		t.Fatalf("relay dev printed no URL and key")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return d
}

func (d *relayDev) client() openai.Client {
	return openai.NewClient(option.WithBaseURL(d.url+"/v1/"), option.WithAPIKey(d.key), option.WithMaxRetries(3))
}

func TestSchedRelaySIGKILLedMidBatch(t *testing.T) {
	t.Parallel()
	endpoint := emutest.Endpoint(t)
	// The whole local service is killed (SIGKILL: nothing is cleaned up,
	// claimed chunks stay claimed) while a batch runs, with the emulator
	// outside it, and started again: the chunks the dead process held are
	// taken over when their leases end, and the batch completes with every
	// row exactly once.
	bin := relayBinary(t)
	mock := mockup.New(mockup.Options{})
	srv := &http.Server{Handler: mock}
	mockAddr := freeAddr(t)
	l, err := netListen(mockAddr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	models := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(models, []byte(replaceMock(`
models:
  - {name: gpt-4o-mini, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 8}
`, mockAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := "kill" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	env := []string{"AWS_ENDPOINT_URL=" + endpoint, "RELAY_PREFIX=" + prefix, "RELAY_ADDR=" + freeAddr(t), "RELAY_CONFIG=" + models,
		"RELAY_LEASE=3s", "RELAY_TICK=1s", "RELAY_CHUNK_ROWS=8", "RELAY_TEST_KEY=sk-test",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1"}

	first := startRelayDev(t, bin, env)
	c := first.client()
	rows := nRows(64, "[[mock:sleep=300ms]] killed")
	b := createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID)
	waitRunning(t, c, b.ID)
	if err := syscall.Kill(-first.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	atKill := mock.Stats().Requests

	second := startRelayDev(t, bin, env)
	c = second.client()
	got := waitBatch(t, c, b.ID)
	if got.Status != "completed" || atKill >= int64(len(rows)) {
		t.Fatalf("status %s; %d upstream calls before the kill (want fewer than %d)", got.Status, atKill, len(rows))
	}
	checkInvariant(t, c, got, idsOf(rows))
	st := store.New(dynamodb.NewFromConfig(emutest.Config(t)), prefix)
	chunks, err := st.Chunks(context.Background(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	takenOver := 0
	for _, ch := range chunks {
		if ch.Attempts > 1 {
			takenOver++
		}
	}
	if takenOver == 0 {
		t.Fatalf("no chunk was taken over after the kill: the batch did not go on through lease re-sends")
	}
	if n, _ := st.InFlight(context.Background(), "gpt-4o-mini"); n != 0 {
		t.Fatalf("model in-flight after the batch: %d, want 0", n)
	}
}
