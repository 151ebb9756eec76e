package app

import (
	"context"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
)

// templateBuilds builds the recipe builder on the template registry: bases
// are the sandbox service's built-ins; packages are cached in the data
// dir beside the image build's. Start fails the builds a stopped server
// left running; Close cancels the running ones. Setup commands run in a
// builder sandbox of the build's tenant (recipe.SandboxRunner) when the
// server runs sandboxes.
func (a *App) templateBuilds(cfg Config) error {
	var runner recipe.Runner
	if a.Sandboxes != nil {
		runner = &recipe.SandboxRunner{Sandboxes: a.Sandboxes, Images: a.Templates, Quota: a.Store.Quota}
	}
	b, err := recipe.New(recipe.Options{Store: recipe.NewStore(a.DB, a.Clock.Now), Registry: a.Templates, Runner: runner,
		Bases: func() []image.Template {
			if a.Sandboxes == nil {
				return nil
			}
			return a.Sandboxes.Templates()
		}, DataDir: cfg.DataDir, Logger: a.log})
	if err != nil {
		return err
	}
	a.TemplateBuilds = b
	return nil
}

// startTemplateBuilds fails what a previous process left running and
// stops the builder with the server.
func (a *App) startTemplateBuilds(ctx context.Context) error {
	if err := a.TemplateBuilds.Recover(ctx); err != nil {
		return err
	}
	a.stops = append(a.stops, a.TemplateBuilds.Close)
	return nil
}
