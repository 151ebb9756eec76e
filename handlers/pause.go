package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// pausedAt is when a paused sandbox was paused (nil: not paused).
func pausedAt(sb sandbox.Sandbox) *string { return timePtr(pausedTime(sb)) }

func pausedTime(sb sandbox.Sandbox) *time.Time {
	if !sb.Paused() {
		return nil
	}
	return sb.PausedAt
}

type pauseFunc func(ctx context.Context, actor audit.Actor, tenantID, id string) (sandbox.Sandbox, error)

// pauseOf is the service's Pause (pause) or Resume.
func pauseOf(svc *sandbox.Service, pause bool) pauseFunc {
	if pause {
		return svc.Pause
	}
	return svc.Resume
}

// APIPauseSandbox pauses a running sandbox: POST /api/v1/sandboxes/:id/pause.
func (h *Handlers) APIPauseSandbox(c echo.Context) error { return h.apiSetPaused(c, true) }

// APIResumeSandbox resumes a paused sandbox: POST /api/v1/sandboxes/:id/resume.
func (h *Handlers) APIResumeSandbox(c echo.Context) error { return h.apiSetPaused(c, false) }

func (h *Handlers) apiSetPaused(c echo.Context, pause bool) error {
	svc, err := h.sandboxService()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	sb, err := pauseOf(svc, pause)(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sandboxJSON(sb))
}

// PauseSandbox is the sandbox page's Pause button: POST /sandboxes/:id/pause.
func (h *Handlers) PauseSandbox(c echo.Context) error { return h.pageSetPaused(c, true) }

// ResumeSandbox is the sandbox page's Resume button: POST /sandboxes/:id/resume.
func (h *Handlers) ResumeSandbox(c echo.Context) error { return h.pageSetPaused(c, false) }

func (h *Handlers) pageSetPaused(c echo.Context, pause bool) error {
	svc, err := h.sandboxService()
	if err == nil {
		cl := CallerOf(c)
		_, err = pauseOf(svc, pause)(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"))
	}
	done, not := "paused", "Not paused: "
	if !pause {
		done, not = "resumed", "Not resumed: "
	}
	switch {
	case err == nil:
		h.flash(c, views.FlashSuccess, "Sandbox "+shortID(c.Param("id"))+" "+done+".")
	case errors.Is(err, errdefs.ErrNotFound):
		return err
	case errors.Is(err, vmpool.ErrUnavailable), errors.Is(err, errdefs.ErrConflict):
		h.flash(c, views.FlashError, not+err.Error())
	default:
		return err
	}
	return redirect(c, "/sandboxes/"+c.Param("id"))
}
