package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// cliActor is who admin commands act as in the audit log.
var cliActor = audit.Actor{Kind: "system", ID: "cli", Name: "stockade admin command"}

// openStore opens and migrates the same database `serve` uses.
func openStore(ctx context.Context, fs *flag.FlagSet, args []string, getenv func(string) string, stderr io.Writer) (*tenants.Store, []string, error) {
	db, rest, err := openDB(ctx, fs, args, getenv, stderr)
	if err != nil {
		return nil, nil, err
	}
	return tenants.NewStore(db, nil), rest, nil
}

// openDB is openStore's database.
func openDB(ctx context.Context, fs *flag.FlagSet, args []string, getenv func(string) string, stderr io.Writer) (*gorm.DB, []string, error) {
	var cfg config
	fs.SetOutput(stderr)
	cfg.flags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return nil, nil, exitError(2)
	}
	if err := cfg.check(); err != nil {
		return nil, nil, err
	}
	db, err := tenants.Open(ctx, cfg.DB, cfg.DataDir)
	if err != nil {
		return nil, nil, err
	}
	if err := tenants.Migrate(ctx, db); err != nil {
		return nil, nil, fmt.Errorf("migrate database: %w", err)
	}
	return db, fs.Args(), nil
}

// openTenant is openStore for a command that acts in the tenant its
// --tenant flag (slug, defined on fs) names.
func openTenant(ctx context.Context, fs *flag.FlagSet, args []string, getenv func(string) string, stderr io.Writer, slug *string) (*tenants.Store, tenants.Tenant, error) {
	store, _, err := openStore(ctx, fs, args, getenv, stderr)
	if err != nil {
		return nil, tenants.Tenant{}, err
	}
	t, err := store.TenantBySlug(ctx, *slug)
	if err != nil {
		return nil, tenants.Tenant{}, fmt.Errorf("tenant %q: %w", *slug, err)
	}
	return store, t, nil
}

// interleave lets flags follow positional arguments (`tenant create demo --name X`).
func interleave(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
			if !containsEq(a) && i+1 < len(args) && !isBoolFlag(a) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func containsEq(s string) bool {
	for _, r := range s {
		if r == '=' {
			return true
		}
	}
	return false
}

func isBoolFlag(a string) bool { return a == "--exists-ok" || a == "-exists-ok" }

func tenantCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: stockade tenant create SLUG [--name NAME] [--admin EMAIL] [--exists-ok] | stockade tenant ls")
		return exitError(2)
	}
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("tenant create", flag.ContinueOnError)
		name := fs.String("name", "", "display name (default: the slug)")
		admin := fs.String("admin", "", "email to invite as the tenant's first admin")
		existsOK := fs.Bool("exists-ok", false, "succeed if the tenant already exists")
		store, rest, err := openStore(ctx, fs, interleave(args[1:]), getenv, stderr)
		if err != nil {
			return err
		}
		if len(rest) != 1 {
			fmt.Fprintln(stderr, "usage: stockade tenant create SLUG [--name NAME] [--admin EMAIL]")
			return exitError(2)
		}
		t, err := store.CreateTenantWithAdmin(ctx, cliActor, rest[0], *name, *admin)
		if errors.Is(err, errdefs.ErrConflict) && *existsOK {
			fmt.Fprintf(stderr, "tenant %s already exists\n", rest[0])
			return nil
		}
		if err != nil {
			return fmt.Errorf("create tenant: %w", err)
		}
		fmt.Fprintln(stdout, t.Slug)
		return nil
	case "ls", "list":
		fs := flag.NewFlagSet("tenant ls", flag.ContinueOnError)
		store, _, err := openStore(ctx, fs, args[1:], getenv, stderr)
		if err != nil {
			return err
		}
		ts, err := store.ListTenants(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SLUG\tNAME\tMEMBERS\tCREATED")
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", t.Slug, t.Name, t.Members, t.CreatedAt.UTC().Format("2006-01-02 15:04"))
		}
		return tw.Flush()
	}
	fmt.Fprintf(stderr, "stockade tenant: unknown subcommand %q\n", args[0])
	return exitError(2)
}

func memberCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "add" {
		fmt.Fprintln(stderr, "usage: stockade member add --tenant SLUG --email EMAIL --role ROLE")
		return exitError(2)
	}
	fs := flag.NewFlagSet("member add", flag.ContinueOnError)
	slug := fs.String("tenant", "", "tenant slug")
	email := fs.String("email", "", "email of the person (the membership activates at their first sign-in)")
	role := fs.String("role", "developer", "admin, manager, developer, auditor or billing")
	store, t, err := openTenant(ctx, fs, args[1:], getenv, stderr, slug)
	if err != nil {
		return err
	}
	m, err := store.InviteMember(ctx, cliActor, t.ID, *email, tenants.Role(*role))
	if err != nil {
		return fmt.Errorf("add member: %w", err)
	}
	fmt.Fprintln(stdout, m.ID)
	return nil
}

func tokenCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(stderr, "usage: stockade token create --tenant SLUG --role ROLE [--name NAME] [--ttl 30d]")
		return exitError(2)
	}
	fs := flag.NewFlagSet("token create", flag.ContinueOnError)
	slug := fs.String("tenant", "", "tenant slug")
	role := fs.String("role", "", "admin, manager, developer, auditor or billing")
	name := fs.String("name", "cli", "token name")
	ttl := fs.String("ttl", "30d", `lifetime, e.g. "720h" or "30d"`)
	store, t, err := openTenant(ctx, fs, args[1:], getenv, stderr, slug)
	if err != nil {
		return err
	}
	d, err := tenants.ParseTTL(*ttl)
	if err != nil {
		return err
	}
	secret, _, err := store.CreateToken(ctx, cliActor, t.ID, tenants.NewToken{Name: *name, Role: tenants.Role(*role), TTL: d})
	if err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	// The token alone on stdout, for scripts: TOKEN=$(stockade token create ...).
	fmt.Fprintln(stdout, secret)
	return nil
}
