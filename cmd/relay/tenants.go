package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/store"
)

// tenantsCommands are the commands of relay tenants.
var tenantsCommands = []string{"budget", "disable", "enable"}

// runTenants sets or shows a tenant's monthly budget (docs/api.md
// "Budgets, revocation and allow-lists"), in the table as the functions
// read it, or disables or enables a tenant (docs/api.md "Keys").
func runTenants(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("tenants: want %s", oneOf(tenantsCommands))
	}
	switch args[0] {
	case "budget":
	case "disable", "enable":
		return runTenantSwitch(ctx, args, stdout, stderr)
	default:
		return usageErr("tenants: unknown command %q: want %s", args[0], oneOf(tenantsCommands))
	}
	return runBudget(ctx, args[1:], stdout, stderr)
}

// runBudget sets or shows a tenant's budget. set changes only the limits
// it is given (store.Budget.With), and prints the budget as GET /v1/usage
// shows it; a USD limit that no model of the models file can count gets a
// warning (unpricedWarning).
func runBudget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tenants budget", "set --tenant NAME [--monthly-tokens N] [--monthly-usd X] | show --tenant NAME")
	var tenant string
	var given store.Budget // the flags' values
	fs.StringVar(&tenant, "tenant", "", "tenant name")
	fs.Int64Var(&given.MonthlyTokens, "monthly-tokens", 0, "tokens the tenant's batches may use per calendar month (UTC); 0: no limit; left out: unchanged")
	fs.Float64Var(&given.MonthlyUSD, "monthly-usd", 0, "USD per month, counted on models with a price in relay.yaml; 0: no limit; left out: unchanged")
	pos, err := parseArgs(fs, args, stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	var tokens *int64
	var usd *float64
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "monthly-tokens":
			tokens = &given.MonthlyTokens
		case "monthly-usd":
			usd = &given.MonthlyUSD
		}
	})
	switch {
	case len(pos) != 1 || (pos[0] != "set" && pos[0] != "show"):
		return usageErr("tenants budget: want set or show")
	case !auth.ValidTenant(tenant):
		return usageErr("tenants budget %s: --tenant NAME is required (1-64 letters, digits, '-' or '_')", pos[0])
	case given.MonthlyTokens < 0 || given.MonthlyUSD < 0:
		return usageErr("tenants budget set: a budget cannot be negative")
	case pos[0] == "set" && tokens == nil && usd == nil:
		return usageErr("tenants budget set: give --monthly-tokens N, --monthly-usd X or both (0 sets no limit)")
	}
	s, err := keyStore(ctx)
	if err != nil {
		return err
	}
	b, err := s.GetBudget(ctx, tenant)
	if err != nil {
		return err
	}
	if pos[0] == "set" {
		b = b.With(tokens, usd)
		if err := s.PutBudget(ctx, tenant, b); err != nil {
			return err
		}
		if usd != nil && *usd > 0 {
			if why := unpricedWarning(config.ModelsPath()); why != "" {
				fmt.Fprintln(stderr, why)
			}
		}
	}
	return json.NewEncoder(stdout).Encode(b)
}

// unpricedWarning says why a USD limit may count nothing: no model of the
// models file at path has a price (docs/api.md "Budgets, revocation and
// allow-lists"), or the file cannot be read to tell; "" when one has.
func unpricedWarning(path string) string {
	ms, err := config.LoadModels(path)
	if err != nil {
		return fmt.Sprintf("warning: a USD limit counts only models with a price, and the models file could not be read to check (%v)", err)
	}
	for _, m := range ms.Models {
		if m.Price != nil {
			return ""
		}
	}
	return fmt.Sprintf("warning: no model in %s has a price, so the USD limit counts nothing until one does (price: {input_per_mtok, output_per_mtok}); if the service runs another models file, RELAY_CONFIG names it", path)
}

// runTenantSwitch disables or enables a tenant: its record and every key
// of it, so its requests, batches and templates stop (tenant_disabled).
func runTenantSwitch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tenants "+args[0], "NAME")
	pos, err := parseArgs(fs, args[1:], stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	if len(pos) != 1 || !auth.ValidTenant(pos[0]) {
		return usageErr("tenants %s: give one tenant NAME (1-64 letters, digits, '-' or '_')", args[0])
	}
	s, err := keyStore(ctx)
	if err != nil {
		return err
	}
	n, err := s.SetTenantDisabled(ctx, pos[0], args[0] == "disable")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tenant %s %sd (%d keys changed)\n", pos[0], args[0], n)
	return nil
}
