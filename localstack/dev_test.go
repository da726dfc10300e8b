package localstack

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
)

// TestDevOwnsItsEmulator: `relay dev` without AWS_ENDPOINT_URL starts an
// emulator that ends with it when its terminal closes (SIGHUP to its
// process group; the emulator is in a group of its own), so the next run
// starts a fresh one, and a key of the first run gets a 401 saying that
// run's keys went with it.
func TestDevOwnsItsEmulator(t *testing.T) {
	t.Parallel()
	emutest.Require(t)
	bin := relayBinary(t)
	models := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(models, []byte("models:\n  - {name: m, provider: openai, base_url: http://127.0.0.1:1/v1, api_key_env: RELAY_TEST_KEY}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	emu := "http://127.0.0.1:" + port
	env := []string{"AWS_ENDPOINT_URL=", "RELAY_ADDR=" + freeAddr(t), "RELAY_CONFIG=" + models, "RELAY_TEST_KEY=sk-test"}

	first := startRelayDev(t, bin, env, "--emulator-port", port)
	// On a failure, stop it as Ctrl-C would, emulator included (the
	// helper's own cleanup only kills the process).
	t.Cleanup(func() { _ = first.cmd.Process.Signal(os.Interrupt) })
	if !emulator.Answers(emu) {
		t.Fatalf("no emulator on %s while relay dev runs", emu)
	}
	if err := syscall.Kill(-first.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- first.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("relay dev still runs 20 s after SIGHUP")
	}
	if emulator.Answers(emu) {
		t.Fatalf("the emulator on %s outlived relay dev's SIGHUP", emu)
	}

	second := startRelayDev(t, bin, env, "--emulator-port", port)
	t.Cleanup(func() { _ = second.cmd.Process.Signal(os.Interrupt) })
	req, _ := http.NewRequest(http.MethodGet, second.url+"/v1/files", nil)
	req.Header.Set("Authorization", "Bearer "+first.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "earlier run of the local service") {
		t.Fatalf("the first run's key: %d %s; want 401 saying it went with that run", resp.StatusCode, body)
	}
	_ = syscall.Kill(-second.cmd.Process.Pid, syscall.SIGTERM)
	_ = second.cmd.Wait()
	if emulator.Answers(emu) {
		t.Fatalf("the emulator on %s outlived relay dev's SIGTERM", emu)
	}
}
