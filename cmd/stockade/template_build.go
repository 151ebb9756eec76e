package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// templateBuildCmd is `stockade template build -f RECIPE [--follow]`: the
// recipe is checked here first (every failing field at once), then posted;
// --follow streams the build log and exits 1 unless the build succeeded.
func templateBuildCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("template build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "the recipe (YAML or JSON; - is stdin)")
	follow := fs.Bool("follow", false, "stream the build log until the build ends; exit 1 unless it succeeded")
	fs.BoolVar(follow, "w", false, "the same as --follow")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	if *file == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: stockade template build -f RECIPE.yaml [--follow]")
		return exitError(2)
	}
	var src []byte
	var err error
	if *file == "-" {
		src, err = io.ReadAll(io.LimitReader(os.Stdin, recipe.MaxSourceBytes+1))
	} else {
		src, err = os.ReadFile(*file)
	}
	if err != nil {
		return err
	}
	if _, err := recipe.Parse(src); err != nil {
		var b strings.Builder
		fmt.Fprintf(&b, "%s is not a valid recipe:", *file)
		for _, fe := range errdefs.FieldErrors(err) {
			fmt.Fprintf(&b, "\n  %s: %s", fe.Field, fe.Detail)
		}
		return errors.New(b.String())
	}
	c, err := newAPIClient(getenv)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, "POST", "/api/v1/templates", bytes.NewReader(src), "application/yaml")
	if err != nil {
		return err
	}
	var b api.TemplateBuild
	err = json.NewDecoder(resp.Body).Decode(&b)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("build %s: decode the answer: %w", *file, err)
	}
	if b.Reused {
		fmt.Fprintf(stdout, "%s: the same recipe is built already (build %s, version %s)\n", b.Template, b.ID, b.VersionID)
		return nil
	}
	fmt.Fprintf(stderr, "build %s of template %s started\n", b.ID, b.Template)
	if !*follow {
		fmt.Fprintln(stdout, b.ID)
		return nil
	}
	return followBuild(ctx, c, b, stdout, stderr)
}

// followBuild streams the build's log, reconnecting from where it left
// off if the connection drops, then reports how the build ended.
func followBuild(ctx context.Context, c *apiClient, b api.TemplateBuild, stdout, stderr io.Writer) error {
	base := "/api/v1/templates/" + url.PathEscape(b.Template) + "/builds/" + url.PathEscape(b.ID)
	var seen int64
	for attempt := 0; ; attempt++ {
		resp, err := c.do(ctx, "GET", base+"/log?follow=1", nil, "")
		if err == nil {
			// The stream starts at the log's beginning: skip what was shown.
			if _, err := io.CopyN(io.Discard, resp.Body, seen); err == nil {
				n, _ := io.Copy(stdout, resp.Body)
				seen += n
			}
			resp.Body.Close()
		}
		var now api.TemplateBuild
		if err := c.json(ctx, "GET", base, nil, &now); err != nil {
			if attempt >= 5 {
				return err
			}
			time.Sleep(time.Second)
			continue
		}
		if now.State == recipe.StateRunning {
			if attempt >= 50 {
				return fmt.Errorf("build %s: the log stream keeps ending while the build runs", b.ID)
			}
			time.Sleep(time.Second)
			continue
		}
		if now.State != recipe.StateSucceeded {
			fmt.Fprintf(stderr, "build %s failed: %s\n", now.ID, now.Error)
			return exitError(1)
		}
		fmt.Fprintf(stderr, "template %s: version %s ready\n", now.Template, now.VersionID)
		return nil
	}
}
