//go:build nodesdk

package localstack

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// nodeSDKs are the official Node SDKs the compatibility script imports,
// pinned in the repository's package.json and installed by npm ci (make
// test-deps).
var nodeSDKs = []string{"openai", "@anthropic-ai/sdk"}

// TestNodeSDKs runs localstack/sdk/node_sdk_test.mjs against a runtime:
// files, uploads, batches (usage details included), models and message
// batches through the official Node SDKs, with the request id each exposes.
func TestNodeSDKs(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not on PATH: make test-deps installs it (Debian's nodejs and npm), then npm ci")
	}
	checkNodeSDKs(t, "..")
	rt := runtime(t)
	key, err := rt.Key(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("sdk", "node_sdk_test.mjs"))
	cmd.Env = append(os.Environ(), "RELAY_BASE_URL="+rt.URL, "RELAY_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node sdk/node_sdk_test.mjs: %v\n%s", err, out)
	}
}

// checkNodeSDKs fails unless root's node_modules holds each SDK at the
// version package.json pins.
func checkNodeSDKs(t *testing.T, root string) {
	t.Helper()
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := readJSON(filepath.Join(root, "package.json"), &pkg); err != nil {
		t.Fatal(err)
	}
	for _, name := range nodeSDKs {
		want := pkg.DevDependencies[name]
		if want == "" {
			t.Fatalf("package.json does not pin %s", name)
		}
		var got struct{ Version string }
		if err := readJSON(filepath.Join(root, "node_modules", name, "package.json"), &got); err != nil || got.Version != want {
			t.Fatalf("node_modules lacks %s %s (found %q): run  npm ci  in the repository root (make test-deps does)", name, want, got.Version)
		}
	}
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
