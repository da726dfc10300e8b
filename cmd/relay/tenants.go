package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/relaybatch/relay/internal/auth"
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
	fs := newFlagSet("tenants budget", "set --tenant NAME --monthly-tokens N [--monthly-usd X] | show --tenant NAME")
	var tenant string
	var b store.Budget
	fs.StringVar(&tenant, "tenant", "", "tenant name")
	fs.Int64Var(&b.MonthlyTokens, "monthly-tokens", 0, "tokens the tenant's batches may use per calendar month (UTC); 0: no limit")
	fs.Float64Var(&b.MonthlyUSD, "monthly-usd", 0, "USD per month, counted on models with a price in relay.yaml; 0: no limit")
	pos, err := parseArgs(fs, args[1:], stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	limits := 0
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "tenant" {
			limits++
		}
	})
	switch {
	case len(pos) != 1 || (pos[0] != "set" && pos[0] != "show"):
		return usageErr("tenants budget: want set or show")
	case !auth.ValidTenant(tenant):
		return usageErr("tenants budget %s: --tenant NAME is required (1-64 letters, digits, '-' or '_')", pos[0])
	case b.MonthlyTokens < 0 || b.MonthlyUSD < 0:
		return usageErr("tenants budget set: a budget cannot be negative")
	case pos[0] == "set" && limits == 0:
		return usageErr("tenants budget set: give --monthly-tokens N, --monthly-usd X or both (0 sets no limit)")
	}
	s, err := keyStore(ctx)
	if err != nil {
		return err
	}
	if pos[0] == "set" {
		if err := s.PutBudget(ctx, tenant, b); err != nil {
			return err
		}
	} else if b, err = s.GetBudget(ctx, tenant); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(b)
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
