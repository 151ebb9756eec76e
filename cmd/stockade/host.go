package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
)

const hostHelp = `usage (on the server's database, like tenant create):
  stockade host ls [--json]                         the libvirt hosts: state, health, labels, VMs
  stockade host add [--labels k=v,k=v] URI          add one (it must answer first)
  stockade host cordon [--reason R] [--force] URI   no new VMs there
  stockade host uncordon URI                        active again
  stockade host drain [--reason R] [--force] URI    no new VMs, warm VMs moved, sandboxes left to end
  stockade host rm URI                              remove a host with no VM left

Every server on the database follows within a few seconds. --force cordons
or drains even the last active host.
`

// hostCmd manages the libvirt hosts in the server's database: ls, add,
// cordon, uncordon, drain, rm. (API tokens are never platform operators, so
// this is an admin command; the pages and /api/v1/operator/hosts do the
// same for a signed-in operator.)
func hostCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, hostHelp)
		return exitError(2)
	}
	verb := args[0]
	switch verb {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, hostHelp)
		return nil
	case "ls", "list", "add", "cordon", "uncordon", "drain", "rm", "remove":
	default:
		fmt.Fprintf(stderr, "stockade host: unknown command %q\n\n%s", verb, hostHelp)
		return exitError(2)
	}
	fs := flag.NewFlagSet("host "+verb, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON (ls)")
	labels := fs.String("labels", "", "key=value labels, comma separated (add)")
	reason := fs.String("reason", "", "why (cordon, drain)")
	force := fs.Bool("force", false, "even the last active host (cordon, drain)")
	db, rest, err := openDB(ctx, fs, interleave(args[1:]), getenv, stderr)
	if err != nil {
		return err
	}
	ts := tenants.NewStore(db, nil)
	list := verb == "ls" || verb == "list"
	if (list && len(rest) != 0) || (!list && len(rest) != 1) {
		fmt.Fprint(stderr, hostHelp)
		return exitError(2)
	}
	store := vmpool.NewStore(db, nil)
	var uri string
	if !list {
		uri = strings.TrimSpace(rest[0])
	}
	var h vmpool.Host
	switch verb {
	case "ls", "list":
		hs, err := store.Hosts(ctx)
		if err != nil {
			return err
		}
		return printHosts(ctx, store, hs, *asJSON, stdout)
	case "add":
		l, err := vmpool.ParseLabels("labels", *labels)
		if err != nil {
			return fmt.Errorf("host add: --%w", err)
		}
		install, err := ts.InstallationID(ctx)
		if err != nil {
			return err
		}
		rec, err := vmpool.CheckHost(ctx, vmpool.ConnectLibvirt, uri, install, 30*time.Second, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			return fmt.Errorf("host add: %w", err)
		}
		rec.Labels = l
		h, err = store.AddHost(ctx, cliActor, rec)
		if err != nil {
			return err
		}
	case "cordon":
		h, err = store.CordonHost(ctx, cliActor, uri, *reason, *force)
	case "uncordon":
		h, err = store.UncordonHost(ctx, cliActor, uri)
	case "drain":
		h, err = store.DrainHost(ctx, cliActor, uri, *reason, *force)
	case "rm", "remove":
		if _, err = store.RemoveHost(ctx, cliActor, uri); err == nil {
			fmt.Fprintln(stdout, uri, "removed")
		}
		return err
	}
	if err != nil {
		return err
	}
	return printHosts(ctx, store, []vmpool.Host{h}, *asJSON, stdout)
}

func printHosts(ctx context.Context, store *vmpool.Store, hs []vmpool.Host, asJSON bool, stdout io.Writer) error {
	vms, err := store.AllVMs(ctx)
	if err != nil {
		return err
	}
	active := map[string]int{}
	for _, vm := range vms {
		if vm.State.Active() {
			active[vm.HostURI]++
		}
	}
	type row struct {
		URI       string            `json:"uri"`
		State     string            `json:"state"`
		Reason    string            `json:"state_reason,omitempty"`
		Down      bool              `json:"down"`
		Labels    map[string]string `json:"labels"`
		CPUs      int               `json:"cpus"`
		MemoryMiB uint64            `json:"memory_mib"`
		VMs       int               `json:"vms"`
	}
	var rows []row
	for _, h := range hs {
		if h.State == vmpool.HostRemoved {
			continue
		}
		r := row{URI: h.URI, State: string(h.State), Reason: h.StateReason, Down: h.DownAt != nil, Labels: map[string]string(h.Labels),
			CPUs: h.CPUs, MemoryMiB: h.MemoryKiB / 1024, VMs: active[h.URI]}
		if r.Labels == nil {
			r.Labels = map[string]string{}
		}
		if r.State == string(vmpool.HostDraining) && r.VMs == 0 {
			r.State = "drained"
		}
		if r.Down {
			r.State = "down"
		}
		rows = append(rows, r)
	}
	if asJSON {
		b, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		return writeIndented(stdout, b)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "URI\tSTATE\tCPUS\tMEMORY MIB\tVMS\tLABELS\tREASON")
	for _, r := range rows {
		labels := vmpool.Labels(r.Labels).String()
		if labels == "" {
			labels = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.URI, r.State, r.CPUs, r.MemoryMiB, r.VMs, labels, r.Reason)
	}
	return tw.Flush()
}
