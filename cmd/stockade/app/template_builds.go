package app

import (
	"context"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
)

// templateBuilds builds the recipe builder on the template registry: bases
// are the sandbox service's built-ins; packages are cached in the data
// dir beside the image build's. Start fails the builds a stopped server
// left running; Close cancels the running ones.
func (a *App) templateBuilds(cfg Config) error {
	b, err := recipe.New(recipe.Options{Store: recipe.NewStore(a.DB, a.Clock.Now), Registry: a.Templates,
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
