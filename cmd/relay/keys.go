package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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
	cfg, env, err := awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	return store.New(dynamodb.NewFromConfig(cfg), env.Table), nil
}

// awsConfig is the AWS configuration and the service's environment the
// CLI's AWS commands (keys, tenants, admin) use: the emulator's when
// AWS_ENDPOINT_URL is set, the caller's credentials otherwise.
func awsConfig(ctx context.Context) (aws.Config, config.Env, error) {
	env, err := config.FromEnv()
	if err != nil {
		return aws.Config{}, env, err
	}
	var opts []func(*awsconfig.LoadOptions) error
	if endpointSet() {
		if err := emulator.CheckEndpoint(os.Getenv("AWS_ENDPOINT_URL")); err != nil {
			return aws.Config{}, env, err
		}
		// An emulator takes any credentials; spare the user from exporting them.
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return cfg, env, fmt.Errorf("load AWS config: %w", err)
	}
	if !endpointSet() {
		// Without credentials the SDK's last resort is EC2's instance
		// metadata, whose error says nothing of what to set.
		if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
			return cfg, env, fmt.Errorf("no AWS credentials found: for the local service, set AWS_ENDPOINT_URL to the emulator make dev printed "+
				"(export AWS_ENDPOINT_URL=http://127.0.0.1:%d); for a deployed stack, configure AWS credentials "+
				"(aws configure, AWS_PROFILE or AWS_ACCESS_KEY_ID) [%w]", emulator.DefaultPort, err)
		}
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return cfg, env, nil
}

// keysCommands are the commands of relay keys.
var keysCommands = []string{"create", "list", "disable", "rotate", "webhook-secret"}

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("keys: want %s", oneOf(keysCommands))
	}
	synopsis, ok := map[string]string{
		"create":         "--tenant NAME [--scopes files,batches,admin] [--models a,b] [--expires-in 30d]",
		"list":           "[--json]",
		"disable":        "KEY_ID|KEY",
		"rotate":         "KEY_ID [--overlap 24h]",
		"webhook-secret": "--tenant NAME",
	}[args[0]]
	if !ok {
		return usageErr("keys: unknown command %q: want %s", args[0], oneOf(keysCommands))
	}
	fs := newFlagSet("keys "+args[0], synopsis)
	var tenant, scopes, models, expiresIn, overlap string
	var asJSON bool
	switch args[0] {
	case "create":
		fs.StringVar(&tenant, "tenant", "", "tenant name")
		fs.StringVar(&scopes, "scopes", "files,batches", "comma-separated scopes: files, batches, admin")
		fs.StringVar(&models, "models", "", "comma-separated models the key's batches may name (default: all)")
		fs.StringVar(&expiresIn, "expires-in", "", "the key stops working this long from now, e.g. 30d or 12h (default: never)")
	case "rotate":
		fs.StringVar(&overlap, "overlap", "24h", "how long the old secret keeps working, e.g. 24h, 7d or 0")
	case "list":
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	case "webhook-secret":
		fs.StringVar(&tenant, "tenant", "", "tenant name")
	}
	pos, err := parseArgs(fs, args[1:], stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	takesID := args[0] == "disable" || args[0] == "rotate"
	expires, errExp := days(expiresIn)
	over, errOver := days(overlap)
	switch {
	case takesID && len(pos) != 1:
		return usageErr("keys %s: give one KEY_ID (from keys list) or the key itself", args[0])
	case !takesID && len(pos) != 0:
		return usageErr("keys %s takes no arguments", args[0])
	case args[0] != "list" && !takesID && tenant == "":
		return usageErr("keys %s: --tenant NAME is required", args[0])
	case errExp != nil || expiresIn != "" && expires <= 0:
		return usageErr("keys create: --expires-in %q: want a positive duration such as 30d or 12h", expiresIn)
	case errOver != nil || over < 0:
		return usageErr("keys rotate: --overlap %q: want a duration such as 24h, 7d or 0", overlap)
	}
	s, err := keyStore(ctx)
	if err != nil {
		return err
	}
	switch args[0] {
	case "create":
		n := auth.NewKey{Tenant: tenant, Scopes: strings.Split(scopes, ","), Models: splitList(models)}
		if expires > 0 {
			n.ExpiresAt = time.Now().Add(expires)
		}
		raw, _, err := auth.Create(ctx, s, n)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, raw)
		return nil
	case "rotate":
		id := pos[0]
		if len(id) > 12 {
			k, err := s.GetKey(ctx, apikey.Hash(id))
			if err != nil {
				return fmt.Errorf("keys rotate: no key %q (see relay keys list): %w", id[:3]+"…", err)
			}
			id = k.ID
		}
		raw, _, err := auth.Rotate(ctx, s, id, over, time.Now())
		if errors.Is(err, apikey.ErrNoKey) {
			return fmt.Errorf("keys rotate: no key %q (see relay keys list)", id)
		} else if err != nil {
			return err
		}
		fmt.Fprintln(stdout, raw)
		fmt.Fprintf(stderr, "key %s has a new secret (above); the old one works until %s\n", id, time.Now().Add(over).UTC().Format(time.RFC3339))
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
		fmt.Fprintln(tw, "KEY ID\tTENANT\tSCOPES\tMODELS\tSTATUS\tCREATED\tEXPIRES")
		now := time.Now()
		for _, k := range ks {
			status, expiry := "active", "never"
			switch code, _ := k.Refusal(now); code {
			case apikey.CodeDisabled:
				status = "disabled"
			case apikey.CodeExpired:
				status = "expired"
			case apikey.CodeTenantDisabled:
				status = "tenant disabled"
			}
			if k.ExpiresAt > 0 {
				expiry = time.Unix(k.ExpiresAt, 0).UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, strings.Join(k.Scopes, ","), cmp.Or(strings.Join(k.Models, ","), "all"), status,
				time.Unix(k.CreatedAt, 0).UTC().Format(time.RFC3339), expiry)
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

// days parses a duration that may also be given in days ("30d"); "" is 0.
func days(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		d, err := strconv.Atoi(n)
		return time.Duration(d) * 24 * time.Hour, err
	}
	if v == "" {
		return 0, nil
	}
	return time.ParseDuration(v)
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
