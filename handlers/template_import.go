package handlers

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// TemplateImportPath and TemplateImportPage take image uploads: web/
// bounds their bodies at TemplateUploadLimit instead of the body limit.
const (
	TemplateImportPath = "/api/v1/templates/import"
	TemplateImportPage = "/templates/import"
)

// maxImportJSON bounds the JSON body of a pull.
const maxImportJSON = 64 << 10

// TemplateUploadLimit is the bound of an image upload's body (the archive
// and a multipart form's few fields around it).
func (h *Handlers) TemplateUploadLimit() int64 { return h.imports.MaxUpload() + 64<<10 }

// TemplateUploadTooLarge is the refusal of an upload whose declared length
// passes TemplateUploadLimit: answered before anything is read.
func (h *Handlers) TemplateUploadTooLarge(size int64) error { return h.imports.TooLarge(size) }

func templateVersionJSON(v templates.Version) api.TemplateVersion {
	return api.TemplateVersion{ID: v.ID, Name: v.Name, Seq: v.Seq, Source: v.Source, SourceRef: v.SourceRef, Digest: v.Digest,
		SizeBytes: v.SizeBytes, State: string(v.State), Env: v.Defaults.Env, User: v.Defaults.User, Workdir: v.Defaults.Workdir,
		CreatedBy: v.CreatedBy, CreatedAt: v.CreatedAt.UTC().Format(timeJSON)}
}

// APIImportTemplate imports a tenant template from an OCI image: a
// multipart upload (name, image), a raw application/x-tar body with
// ?name=, or JSON {name, image, credentials_secret} to pull it. 201 with
// the version; a refused image leaves nothing.
func (h *Handlers) APIImportTemplate(c echo.Context) error {
	cl := CallerOf(c)
	req := oci.Request{Actor: cl.Actor(c)}
	defer func() { req.Upload.Close() }()
	mt, _, _ := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType))
	switch mt {
	case echo.MIMEApplicationJSON:
		c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, maxImportJSON)
		var in api.ImportTemplate
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
		if strings.TrimSpace(in.Image) == "" {
			return errdefs.Required("image")
		}
		req.Name, req.Image, req.CredentialsSecret = strings.TrimSpace(in.Name), in.Image, strings.TrimSpace(in.CredentialsSecret)
	case api.MediaTar:
		req.Name = strings.TrimSpace(c.QueryParam("name"))
		if err := h.checkImportName(req.Name); err != nil {
			return err
		}
		up, err := h.imports.Receive(c.Request().Body)
		if err != nil {
			return err
		}
		req.Upload = up
	case "multipart/form-data":
		name, up, err := h.receiveImportForm(c)
		if err != nil {
			return err
		}
		req.Name, req.Upload = name, up
	default:
		return &errdefs.MalformedError{Field: "Content-Type", Detail: "must be multipart/form-data (name, image), application/x-tar (?name=) or application/json"}
	}
	v, err := h.imports.Import(c.Request().Context(), cl.Tenant.ID, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, templateVersionJSON(v))
}

func (h *Handlers) checkImportName(name string) error {
	if name == "" {
		return errdefs.Required("name")
	}
	return h.imports.CheckName(name)
}

// receiveImportForm reads a multipart form's name and image: streamed
// when nothing has parsed the form yet (an API token's request), or from
// the form the CSRF check parsed (a browser's).
func (h *Handlers) receiveImportForm(c echo.Context) (string, *oci.Upload, error) {
	r := c.Request()
	if r.MultipartForm == nil && r.Form == nil {
		mr, err := r.MultipartReader()
		if err != nil {
			return "", nil, &errdefs.MalformedError{Field: "Content-Type", Detail: err.Error()}
		}
		var name string
		var up *oci.Upload
		for {
			p, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				up.Close()
				return "", nil, tooLargeOr(h, err, &errdefs.MalformedError{Field: "body", Detail: "not a multipart form: " + err.Error()})
			}
			switch p.FormName() {
			case "name":
				b, _ := io.ReadAll(io.LimitReader(p, 256))
				name = strings.TrimSpace(string(b))
			case "image":
				if up != nil {
					up.Close()
					return "", nil, errdefs.Invalid("image", "count", "one image per import")
				}
				if up, err = h.imports.Receive(p); err != nil {
					return "", nil, err
				}
			}
			p.Close()
		}
		if up == nil {
			return "", nil, errdefs.Required("image")
		}
		if err := h.checkImportName(name); err != nil {
			up.Close()
			return "", nil, err
		}
		return name, up, nil
	}
	if err := r.ParseMultipartForm(32 << 20); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		return "", nil, tooLargeOr(h, err, &errdefs.MalformedError{Field: "body", Detail: "not a multipart form: " + err.Error()})
	}
	name := strings.TrimSpace(r.FormValue("name"))
	if err := h.checkImportName(name); err != nil {
		return "", nil, err
	}
	var fh *multipart.FileHeader
	if r.MultipartForm != nil && len(r.MultipartForm.File["image"]) > 0 {
		fh = r.MultipartForm.File["image"][0]
	}
	if fh == nil {
		return "", nil, errdefs.Required("image")
	}
	f, err := fh.Open()
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	up, err := h.imports.Receive(f)
	return name, up, err
}

func tooLargeOr(h *Handlers, err, other error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return h.imports.TooLarge(-1)
	}
	return other
}

// TemplateImportForm shows the form to import an image archive.
func (h *Handlers) TemplateImportForm(c echo.Context) error {
	return render(c, http.StatusOK, views.TemplateImport(h.page(c, "Import an image", views.NavTemplateImport), views.TemplateImportForm{MaxUpload: h.imports.MaxUpload()}))
}

// ImportTemplate imports the image the form uploads, then shows the
// templates; a refused image is said in place, next to its field.
func (h *Handlers) ImportTemplate(c echo.Context) error {
	cl := CallerOf(c)
	form := views.TemplateImportForm{MaxUpload: h.imports.MaxUpload()}
	name, up, err := h.receiveImportForm(c)
	if err == nil {
		form.Name = name
		_, err = h.imports.Import(c.Request().Context(), cl.Tenant.ID, oci.Request{Actor: cl.Actor(c), Name: name, Upload: up})
		up.Close()
	} else {
		form.Name = strings.TrimSpace(c.FormValue("name"))
	}
	if err != nil {
		return reshow(c, err, refusal{
			Conflict: &errdefs.FieldError{Field: "name", Rule: "taken", Detail: "a built-in template, or a template built from a recipe, has this name"},
			Quota:    func(err error) string { return err.Error() },
		}, &form.Errors, func() (templ.Component, error) {
			return views.TemplateImport(h.page(c, "Import an image", views.NavTemplateImport), form), nil
		})
	}
	return c.Redirect(http.StatusSeeOther, "/templates?imported="+name)
}
