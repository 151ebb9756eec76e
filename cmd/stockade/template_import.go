package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"

	"github.com/stockade-dev/stockade/handlers/api"
)

// templateImportCmd is `stockade template import NAME FILE.tar` (a docker
// save tarball or an OCI layout tar, streamed) or `stockade template import
// NAME --image REF [--credentials SECRET]` (pulled by the server through
// the tenant's egress). It prints the new version.
func templateImportCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("template import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ref := fs.String("image", "", "pull this image (registry/repository:tag or @sha256:…) instead of uploading a file")
	cred := fs.String("credentials", "", "a tenant secret with the registry's USER:PASSWORD (or token), scoped to its host")
	usageLine := "usage: stockade template import NAME FILE.tar | stockade template import NAME --image REF [--credentials SECRET]"
	// NAME comes first; the flags may follow it.
	if len(args) == 0 || len(args[0]) == 0 || args[0][0] == '-' {
		fmt.Fprintln(stderr, usageLine)
		return exitError(2)
	}
	name := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return exitError(2)
	}
	if (*ref == "") == (fs.NArg() != 1) || (*ref != "" && fs.NArg() != 0) || (*cred != "" && *ref == "") {
		fmt.Fprintln(stderr, usageLine)
		return exitError(2)
	}
	c, err := newAPIClient(getenv)
	if err != nil {
		return err
	}
	var v api.TemplateVersion
	if *ref != "" {
		fmt.Fprintf(stderr, "pulling %s as template %s…\n", *ref, name)
		err = c.json(ctx, "POST", "/api/v1/templates/import", api.ImportTemplate{Name: name, Image: *ref, CredentialsSecret: *cred}, &v)
	} else {
		err = uploadImage(ctx, c, name, fs.Arg(0), &v, stderr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "template %s version %d (%s): %s, %d bytes, from %s\n", v.Name, v.Seq, v.ID, v.Digest, v.SizeBytes, v.SourceRef)
	return nil
}

func uploadImage(ctx context.Context, c *apiClient, name, file string, v *api.TemplateVersion, stderr io.Writer) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", file)
	}
	fmt.Fprintf(stderr, "uploading %s (%d bytes) as template %s…\n", file, fi.Size(), name)
	resp, err := c.do(ctx, "POST", "/api/v1/templates/import?name="+url.QueryEscape(name), sizedReader{Reader: f, size: fi.Size()}, "application/x-tar")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("import %s: decode the answer: %w", file, err)
	}
	return nil
}
