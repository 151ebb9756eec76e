package app

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	"github.com/stockade-dev/stockade/tenants/netguard"
)

// templateImports builds the OCI importer: on the tenants' template
// registry (made here when nothing made it before), pulling through an
// egress gateway of its own on the same policies, event store and audit
// log as the sandboxes' (Options.TemplateImportGateway in tests).
func (a *App) templateImports(cfg Config, o Options) (*oci.Importer, error) {
	if a.Templates == nil {
		var err error
		if a.Templates, err = templates.New(templates.Config{DB: a.DB, DataDir: cfg.DataDir, Clock: o.Clock, Logger: a.log,
			Builtins: func() []image.Template {
				if a.Sandboxes == nil {
					return nil
				}
				return a.Sandboxes.Templates()
			}}); err != nil {
			return nil, err
		}
	}
	regs, err := oci.ParseRegistries(strings.Join(cfg.TemplateRegistries, ","))
	if err != nil {
		return nil, err
	}
	gw := o.TemplateImportGateway
	if gw == nil {
		allow, err := netguard.ParseAllowance(strings.Join(cfg.EgressAllowCIDRs, ","))
		if err != nil {
			return nil, fmt.Errorf("STOCKADE_EGRESS_ALLOW_CIDRS: %w", err)
		}
		g, err := egress.New(egress.Config{Policies: egress.FromPolicy(a.Policies), Store: a.Egress, Audit: a.Audit,
			AllowCIDRs: allow, Logger: a.log, Clock: o.Clock})
		if err != nil {
			return nil, err
		}
		gw = g
	}
	return oci.New(oci.Config{Templates: a.Templates, Quota: a.Store.Quota, Audit: a.Audit,
		ScratchDir: filepath.Join(cfg.DataDir, "template-imports"), MaxUpload: cfg.TemplateMaxUploadBytes,
		Registries: regs, Gateway: gw, Secrets: a.Secrets, Logger: a.log})
}
