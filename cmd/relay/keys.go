package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/config"
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
		// An emulator takes any credentials; spare the user from exporting them.
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return store.New(dynamodb.NewFromConfig(cfg), env.Table), nil
}

func runKeys(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageErr("keys: want create, list, disable or webhook-secret")
	}
	fs := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	tenant := fs.String("tenant", "", "tenant name")
	scopes := fs.String("scopes", "files,batches", "comma-separated scopes: files, batches, admin")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return exitError{2, err}
	}
	s, err := keyStore(ctx)
	if err != nil {
		return err
	}
	switch args[0] {
	case "create":
		if *tenant == "" {
			return usageErr("keys create: --tenant NAME is required")
		}
		raw, _, err := auth.Create(ctx, s, *tenant, strings.Split(*scopes, ","))
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
		if *asJSON {
			return json.NewEncoder(stdout).Encode(ks)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY ID\tTENANT\tSCOPES\tSTATUS\tCREATED")
		for _, k := range ks {
			status := "active"
			if k.Disabled {
				status = "disabled"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, strings.Join(k.Scopes, ","), status, time.Unix(k.CreatedAt, 0).UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	case "disable":
		if fs.NArg() != 1 {
			return usageErr("keys disable: give one KEY_ID (from keys list) or the key itself")
		}
		if err := s.DisableKey(ctx, fs.Arg(0)); errors.Is(err, auth.ErrNoKey) {
			return fmt.Errorf("keys disable: no key %q (see relay keys list)", fs.Arg(0))
		} else if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "disabled")
		return nil
	case "webhook-secret":
		if *tenant == "" {
			return usageErr("keys webhook-secret: --tenant NAME is required")
		}
		sec, err := auth.WebhookSecret(ctx, s, *tenant)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, sec)
		return nil
	}
	return usageErr("keys: unknown command %q: want create, list, disable or webhook-secret", args[0])
}
