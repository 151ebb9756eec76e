package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/stockade-dev/stockade/handlers/api"
)

// templateCmd is the API client for sandbox templates: ls, show, rm here;
// build (template_build.go) and import (template_import.go) are their own.
func templateCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := subcommand(args, getenv, stderr)
	if err != nil {
		return err
	}
	switch args[0] {
	case "ls", "list":
		return templateList(ctx, c, stdout)
	case "show", "get":
		return showJSON(ctx, c, args, "template", "/api/v1/templates/", stdout, stderr)
	case "rm", "delete":
		if len(args) < 2 {
			fmt.Fprintln(stderr, "usage: stockade template rm NAME...")
			return exitError(2)
		}
		for _, name := range args[1:] {
			if err := c.json(ctx, "DELETE", "/api/v1/templates/"+url.PathEscape(name), nil, nil); err != nil {
				return fmt.Errorf("template %s: %w", name, err)
			}
			fmt.Fprintln(stdout, name)
		}
		return nil
		// Template subcommands of other files: one case each.
		// case "build": (template_build.go)
		// case "import": (template_import.go)
	}
	fmt.Fprintf(stderr, "stockade template: unknown command %q\n\n%s", args[0], usage)
	return exitError(2)
}

// templateList prints the templates the tenant can see.
func templateList(ctx context.Context, c *apiClient, stdout io.Writer) error {
	var out api.TemplateList
	if err := c.json(ctx, "GET", "/api/v1/templates", nil, &out); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tVERSION\tSTATE\tSIZE\tDIGEST\tIN USE\tCREATED")
	for _, t := range out.Templates {
		version, state, created, inUse := t.Version, "ready", "-", "-"
		if !t.Builtin {
			inUse = fmt.Sprint(t.InUse)
			if len(t.Versions) > 0 {
				v := t.Versions[0]
				for _, x := range t.Versions {
					if x.ID == t.Version {
						v = x
						break
					}
				}
				version, state = fmt.Sprintf("v%d", v.Seq), v.State
			}
			if t.CreatedAt != nil {
				created = stamp(*t.CreatedAt)
			}
		}
		digest := strings.TrimPrefix(t.Digest, "sha256:")
		if len(digest) > 12 {
			digest = digest[:12]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Source, version, state, mibOf(t.SizeBytes), digest, inUse, created)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stdout, "\ntemplate storage: %s of %d MiB\n", mibOf(out.StorageBytes), out.QuotaMiB)
	return err
}

func mibOf(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
