package handlers

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// Recipe template builds (sandbox/templates/recipe): POST a recipe, read
// its builds and their logs, live.

func (h *Handlers) templateBuilder() (*recipe.Builder, error) {
	if h.builds == nil {
		return nil, fmt.Errorf("template builds: %w: this server runs without the recipe builder", vmpool.ErrUnavailable)
	}
	return h.builds, nil
}

// buildLogURL is where build b's log is read.
func buildLogURL(b recipe.Build) string {
	return "/api/v1/templates/" + url.PathEscape(b.TemplateName) + "/builds/" + url.PathEscape(b.ID) + "/log"
}

func buildJSON(b recipe.Build, reused bool) api.TemplateBuild {
	return api.TemplateBuild{ID: b.ID, Template: b.TemplateName, VersionID: b.VersionID, RecipeDigest: b.RecipeDigest,
		State: b.State, Step: b.Step, Steps: recipe.Steps, StepName: recipe.StepName(b.Step), Error: b.Error,
		LogBytes: b.LogBytes, LogURL: buildLogURL(b), Reused: reused, CreatedBy: b.CreatedBy,
		StartedAt: b.StartedAt.UTC().Format(timeJSON), EndedAt: timePtr(b.EndedAt)}
}

// APIBuildTemplate starts a build from the recipe in the body (YAML or
// JSON): POST /api/v1/templates answers 202 with the build and its log's
// Location; a recipe built before whose version is still ready answers
// 200 with that build (reused). Every check runs before anything is
// written: a bad field, an unknown base or package, a name clash is a 4xx
// and leaves nothing.
func (h *Handlers) APIBuildTemplate(c echo.Context) error {
	rb, err := h.templateBuilder()
	if err != nil {
		return err
	}
	if mt, _, _ := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType)); !yamlTypes[mt] {
		return &errdefs.MalformedError{Field: "Content-Type", Detail: "must be application/yaml or application/json"}
	}
	src, err := io.ReadAll(io.LimitReader(c.Request().Body, recipe.MaxSourceBytes+1))
	if err != nil {
		return jsonError(err)
	}
	cl := CallerOf(c)
	b, reused, err := rb.Start(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, src)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, buildLogURL(b))
	status := http.StatusAccepted
	if reused {
		status = http.StatusOK
	}
	return c.JSON(status, buildJSON(b, reused))
}

// APITemplateBuilds lists template :name's builds: GET .../builds.
func (h *Handlers) APITemplateBuilds(c echo.Context) error {
	rb, err := h.templateBuilder()
	if err != nil {
		return err
	}
	bs, err := rb.Store().List(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("name"))
	if err != nil {
		return err
	}
	out := api.TemplateBuildList{Builds: make([]api.TemplateBuild, 0, len(bs))}
	for _, b := range bs {
		out.Builds = append(out.Builds, buildJSON(b, false))
	}
	return c.JSON(http.StatusOK, out)
}

// APITemplateBuild answers one build: GET .../builds/:id.
func (h *Handlers) APITemplateBuild(c echo.Context) error {
	rb, err := h.templateBuilder()
	if err != nil {
		return err
	}
	b, err := rb.Store().Get(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("name"), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, buildJSON(b, false))
}

// APITemplateBuildLog answers a build's log as plain text: GET
// .../builds/:id/log. With ?follow=1 it streams until the build ends:
// Server-Sent Events when the client accepts text/event-stream (the build
// page), chunked text otherwise (the CLI, curl).
func (h *Handlers) APITemplateBuildLog(c echo.Context) error {
	rb, err := h.templateBuilder()
	if err != nil {
		return err
	}
	ctx, tenant := c.Request().Context(), CallerOf(c).Tenant.ID
	name, id := c.Param("name"), c.Param("id")
	if f := c.QueryParam("follow"); f != "1" && f != "true" {
		_, rc, err := rb.Log(ctx, tenant, name, id, 0)
		if err != nil {
			return err
		}
		defer rc.Close()
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return c.Stream(http.StatusOK, "text/plain; charset=utf-8", rc)
	}
	if _, err := rb.Store().Get(ctx, tenant, name, id); err != nil {
		return err // a 404 before the stream starts
	}
	w := c.Response()
	w.Header().Set(echo.HeaderCacheControl, "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	if strings.Contains(c.Request().Header.Get(echo.HeaderAccept), "text/event-stream") {
		return h.buildEvents(c, rb, tenant, name, id)
	}
	w.Header().Set(echo.HeaderContentType, "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, err = rb.Follow(ctx, tenant, name, id, func(chunk []byte, _ recipe.Build) error {
		if len(chunk) == 0 {
			return nil
		}
		if _, err := w.Write(chunk); err != nil {
			return err
		}
		w.Flush()
		return nil
	})
	if err != nil && ctx.Err() == nil {
		h.log.Warn("follow build log", "build", id, "err", err)
	}
	return nil
}

// buildEvent is the data of a build page's "step" and "end" events.
type buildEvent struct {
	State     string `json:"state"`
	Step      int    `json:"step"`
	Steps     int    `json:"steps"`
	StepName  string `json:"step_name"`
	Error     string `json:"error,omitempty"`
	VersionID string `json:"version_id,omitempty"`
}

// buildEvents streams the log as Server-Sent Events: "log" (text to
// append), "step" (the build reached a step) and last "end". A browser
// that reconnects starts again from the beginning ("reset").
func (h *Handlers) buildEvents(c echo.Context, rb *recipe.Builder, tenant, name, id string) error {
	ctx, w := c.Request().Context(), c.Response()
	w.Header().Set(echo.HeaderContentType, "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data any) error {
		b, _ := json.Marshal(data) // a string or a struct of strings and numbers
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return err
		}
		w.Flush()
		return nil
	}
	ev := func(b recipe.Build) buildEvent {
		return buildEvent{State: b.State, Step: b.Step, Steps: recipe.Steps, StepName: recipe.StepName(b.Step), Error: b.Error, VersionID: b.VersionID}
	}
	io.WriteString(w, "retry: 2000\n\n")
	if err := send("reset", ""); err != nil {
		return nil
	}
	b, err := rb.Follow(ctx, tenant, name, id, func(chunk []byte, b recipe.Build) error {
		if len(chunk) > 0 {
			if err := send("log", string(chunk)); err != nil {
				return err
			}
		}
		return send("step", ev(b))
	})
	if err != nil {
		return nil
	}
	_ = send("end", ev(b))
	return nil
}

// Pages: "Build from a recipe" and a build's page.

// TemplateBuildPage is the build form's path.
const TemplateBuildPage = "/templates/build"

func buildPageURL(b recipe.Build) string {
	return "/templates/" + url.PathEscape(b.TemplateName) + "/builds/" + url.PathEscape(b.ID)
}

// TemplateBuildForm shows the recipe form, prefilled with an example.
func (h *Handlers) TemplateBuildForm(c echo.Context) error {
	if _, err := h.templateBuilder(); err != nil {
		return err
	}
	return render(c, http.StatusOK, views.TemplateBuildForm(h.page(c, "Build from a recipe", views.NavTemplateImport),
		views.TemplateBuildFormView{Source: recipe.Example}))
}

// BuildTemplate starts a build from the form's recipe and shows its page;
// a refused recipe comes back with every failing field and the text kept.
func (h *Handlers) BuildTemplate(c echo.Context) error {
	rb, err := h.templateBuilder()
	if err != nil {
		return err
	}
	src := c.FormValue("recipe")
	form := views.TemplateBuildFormView{Source: src}
	cl := CallerOf(c)
	b, _, err := rb.Start(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, []byte(src))
	if err != nil {
		return reshow(c, err, refusal{
			Conflict: &errdefs.FieldError{Field: "/name", Rule: "taken", Detail: "a built-in template, or a template imported from an image, has this name; or two builds run already"},
			Quota:    func(err error) string { return err.Error() },
		}, &form.Errors, func() (templ.Component, error) {
			return views.TemplateBuildForm(h.page(c, "Build from a recipe", views.NavTemplateImport), form), nil
		})
	}
	return c.Redirect(http.StatusSeeOther, buildPageURL(b))
}

// TemplateBuildShow is a build's page: GET /templates/:name/builds/:id.
func (h *Handlers) TemplateBuildShow(c echo.Context) error {
	rb, err := h.templateBuilder()
	if err != nil {
		return err
	}
	ctx, tenant := c.Request().Context(), CallerOf(c).Tenant.ID
	b, rc, err := rb.Log(ctx, tenant, c.Param("name"), c.Param("id"), 0)
	if err != nil {
		return err
	}
	logText, err := io.ReadAll(io.LimitReader(rc, recipe.MaxLogBytes+4096))
	rc.Close()
	if err != nil {
		return fmt.Errorf("read build log %s: %w", b.ID, err)
	}
	v := views.TemplateBuildView{ID: b.ID, Template: b.TemplateName, VersionID: b.VersionID, State: b.State, Step: b.Step,
		Steps: recipe.Steps, StepName: recipe.StepName(b.Step), Error: b.Error, CreatedBy: b.CreatedBy,
		StartedAt: b.StartedAt.UTC().Format("2006-01-02 15:04:05 UTC"), Log: strings.ToValidUTF8(string(logText), "\uFFFD"),
		EventsURL: buildLogURL(b) + "?follow=1", Ended: b.Ended()}
	if b.EndedAt != nil {
		v.EndedAt = b.EndedAt.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return render(c, http.StatusOK, views.TemplateBuild(h.page(c, "Build of "+b.TemplateName, views.NavTemplateImport), v))
}
