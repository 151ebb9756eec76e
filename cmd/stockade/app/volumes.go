package app

import (
	"log/slog"

	"github.com/stockade-dev/stockade/sandbox/volumes"
)

// newVolumes builds the volume service on the app's database, attaching
// disks through the VM pools' hotplug.
func newVolumes(a *App, cfg Config, log *slog.Logger) (*volumes.Service, error) {
	return volumes.New(a.DB, volumes.Config{DataDir: cfg.DataDir, InstallationID: a.InstallationID, Logger: log,
		Clock: a.Clock.Now, Hotplug: volumeHotplug(a)})
}
