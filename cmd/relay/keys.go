package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/store"
)

// keyStore connects to the service's table the way the functions do.
func keyStore(ctx context.Context) (*store.Store, error) {
	env, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	var opts []func(*awsconfig.LoadOptions) error
	if endpointSet() {
		if err := emulator.CheckEndpoint(os.Getenv("AWS_ENDPOINT_URL")); err != nil {
			return nil, err
		}
		// An emulator takes any credentials; spare the user from exporting them.
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	if !endpointSet() {
		// Without credentials the SDK's last resort is EC2's instance
		// metadata, whose error says nothing of what to set.
		if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
			return nil, fmt.Errorf("no AWS credentials found: for the local service, set AWS_ENDPOINT_URL to the emulator make dev printed "+
				"(export AWS_ENDPOINT_URL=http://127.0.0.1:%d); for a deployed stack, configure AWS credentials "+
				"(aws configure, AWS_PROFILE or AWS_ACCESS_KEY_ID) [%w]", emulator.DefaultPort, err)
		}
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return store.New(dynamodb.NewFromConfig(cfg), env.Table), nil
}

// keysCommands are the commands of relay keys.
var keysCommands = []string{"create", "list", "disable", "webhook-secret"}

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("keys: want %s", oneOf(keysCommands))
	}
	synopsis, ok := map[string]string{
		"create":         "--tenant NAME [--scopes files,batches,admin] [--models a,b]",
		"list":           "[--json]",
		"disable":        "KEY_ID|KEY",
		"webhook-secret": "--tenant NAME",
	}[args[0]]
	if !ok {
		return usageErr("keys: unknown command %q: want %s", args[0], oneOf(keysCommands))
	}
	fs := newFlagSet("keys "+args[0], synopsis)
	var tenant, scopes, models string
	var asJSON bool
	switch args[0] {
	case "create":
		fs.StringVar(&tenant, "tenant", "", "tenant name")
		fs.StringVar(&scopes, "scopes", "files,batches", "comma-separated scopes: files, batches, admin")
		fs.StringVar(&models, "models", "", "comma-separated models the key's batches may name (default: all)")
	case "list":
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	case "webhook-secret":
		fs.StringVar(&tenant, "tenant", "", "tenant name")
	}
	pos, err := parseArgs(fs, args[1:], stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	switch {
	case args[0] == "disable" && len(pos) != 1:
		return usageErr("keys disable: give one KEY_ID (from keys list) or the key itself")
	case args[0] != "disable" && len(pos) != 0:
		return usageErr("keys %s takes no arguments", args[0])
	case args[0] != "list" && args[0] != "disable" && tenant == "":
		return usageErr("keys %s: --tenant NAME is required", args[0])
	}
	s, err := keyStore(ctx)
	if err != nil {
		return err
	}
	switch args[0] {
	case "create":
		raw, _, err := auth.Create(ctx, s, tenant, strings.Split(scopes, ","), splitList(models))
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, raw)
		return nil
	case "list":
		ks, err := s.ListKeys(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(stdout).Encode(ks)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY ID\tTENANT\tSCOPES\tMODELS\tSTATUS\tCREATED")
		for _, k := range ks {
			status := "active"
			if k.Disabled {
				status = "disabled"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, strings.Join(k.Scopes, ","), cmp.Or(strings.Join(k.Models, ","), "all"), status, time.Unix(k.CreatedAt, 0).UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	case "disable":
		if err := s.DisableKey(ctx, pos[0]); errors.Is(err, apikey.ErrNoKey) {
			return fmt.Errorf("keys disable: no key %q (see relay keys list)", pos[0])
		} else if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "disabled")
		return nil
	default: // webhook-secret
		sec, err := auth.WebhookSecret(ctx, s, tenant)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, sec)
		return nil
	}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
