package app_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/app/inittest"
)

// LoadLambda, which every function's init calls (app.Start), refuses to
// load without each variable of app.LambdaVars, without a region and with
// a models file it cannot read, naming what is wrong; with all of them it
// loads. internal/app/fn starts each function's main in a child to see
// that it exits on such an error with one line naming the function.
// Not parallel: it sets the process's environment.
func TestLoadLambdaNeedsItsEnvironment(t *testing.T) {
	setEnv := func(t *testing.T, env map[string]string) {
		for _, k := range append(app.LambdaVars, "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
		for k, v := range env {
			t.Setenv(k, v)
		}
	}
	t.Run("complete", func(t *testing.T) {
		setEnv(t, inittest.Env(t))
		if _, err := app.LoadLambda(context.Background()); err != nil {
			t.Fatalf("LoadLambda with the whole environment: %v", err)
		}
	})
	cases := map[string]func(map[string]string){}
	for _, k := range app.LambdaVars {
		cases[k] = func(env map[string]string) { delete(env, k) }
	}
	cases["AWS_REGION"] = func(env map[string]string) { delete(env, "AWS_REGION") }
	cases["RELAY_CONFIG unreadable"] = func(env map[string]string) { env["RELAY_CONFIG"] = "/var/task/relay.yaml.missing" }
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			env := inittest.Env(t)
			edit(env)
			setEnv(t, env)
			_, err := app.LoadLambda(context.Background())
			if want := strings.Fields(name)[0]; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("LoadLambda without %s: %v; want an error naming %s", name, err, want)
			}
		})
	}
}
