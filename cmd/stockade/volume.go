package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/stockade-dev/stockade/handlers/api"
)

// volumeCmd is `stockade volume create|ls|show|resize|rm`.
func volumeCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := subcommand(args, getenv, stderr)
	if err != nil {
		return err
	}
	switch args[0] {
	case "create":
		if len(args) != 3 {
			fmt.Fprintln(stderr, "usage: stockade volume create NAME SIZE_GIB")
			return exitError(2)
		}
		size, err := strconv.Atoi(strings.TrimSuffix(strings.ToLower(args[2]), "g"))
		if err != nil {
			fmt.Fprintf(stderr, "stockade volume create: size %q: want whole GiB, e.g. 10\n", args[2])
			return exitError(2)
		}
		var out api.Volume
		if err := c.json(ctx, "POST", "/api/v1/volumes", api.CreateVolume{Name: args[1], SizeGiB: size}, &out); err != nil {
			return err
		}
		fmt.Fprintln(stdout, out.Name)
		return nil
	case "ls", "list":
		var out api.VolumeList
		if err := c.json(ctx, "GET", "/api/v1/volumes", nil, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSIZE\tATTACHED\tMOUNTED BY\tCREATED")
		for _, v := range out.Volumes {
			var vms, users []string
			for _, a := range v.Attachments {
				vms = append(vms, a.VMID+map[bool]string{true: " (ro)", false: ""}[a.ReadOnly])
			}
			for _, m := range v.Mounts {
				users = append(users, m.SandboxID+":"+m.Path+map[bool]string{true: ":ro", false: ""}[m.ReadOnly])
			}
			fmt.Fprintf(tw, "%s\t%d GiB\t%s\t%s\t%s\n", v.Name, v.SizeGiB, dash(strings.Join(vms, ", ")), dash(strings.Join(users, ", ")), v.CreatedAt)
		}
		fmt.Fprintf(tw, "\n%d of %d GiB of the volume quota used\n", out.UsedGiB, out.QuotaGiB)
		return tw.Flush()
	case "show", "get":
		return showJSON(ctx, c, args, "volume", "/api/v1/volumes/", stdout, stderr)
	case "resize":
		if len(args) != 3 {
			fmt.Fprintln(stderr, "usage: stockade volume resize NAME SIZE_GIB")
			return exitError(2)
		}
		size, err := strconv.Atoi(strings.TrimSuffix(strings.ToLower(args[2]), "g"))
		if err != nil {
			fmt.Fprintf(stderr, "stockade volume resize: size %q: want whole GiB\n", args[2])
			return exitError(2)
		}
		var out api.Volume
		if err := c.json(ctx, "PATCH", "/api/v1/volumes/"+url.PathEscape(args[1]), api.ResizeVolume{SizeGiB: size}, &out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %d GiB\n", out.Name, out.SizeGiB)
		return nil
	case "rm", "delete":
		if len(args) < 2 {
			fmt.Fprintln(stderr, "usage: stockade volume rm NAME...")
			return exitError(2)
		}
		var errs []error
		for _, name := range args[1:] {
			if err := c.json(ctx, "DELETE", "/api/v1/volumes/"+url.PathEscape(name), nil, nil); err != nil {
				errs = append(errs, fmt.Errorf("rm %s: %w", name, err))
				continue
			}
			fmt.Fprintln(stdout, name)
		}
		return errors.Join(errs...)
	}
	fmt.Fprintf(stderr, "stockade volume: unknown command %q\n\n%s", args[0], usage)
	return exitError(2)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// volumeFlag collects repeated --volume NAME:PATH[:ro] flags.
type volumeFlag []api.VolumeMount

func (v *volumeFlag) String() string { return "" }

func (v *volumeFlag) Set(s string) error {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" || (len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw") {
		return fmt.Errorf("%q: want NAME:PATH or NAME:PATH:ro", s)
	}
	*v = append(*v, api.VolumeMount{Name: parts[0], Path: parts[1], ReadOnly: len(parts) == 3 && parts[2] == "ro"})
	return nil
}

var _ flag.Value = (*volumeFlag)(nil)
