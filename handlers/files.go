package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// The native file API beyond read and write (sandbox/fsops.go): stat,
// list, mkdir, remove, move, chmod, watch (Server-Sent Events), uploads
// (octet-stream or multipart) and tar archives.

// maxUploadParts bounds the files of one multipart upload.
const maxUploadParts = 1000

// entryJSON is an entry on the wire.
func entryJSON(e sandbox.Entry) api.FileEntry {
	return api.FileEntry{Name: e.Name, Type: e.Type, Path: e.Path, Size: e.Size, Mode: fmt.Sprintf("%04o", e.Mode),
		Permissions: e.Permissions, UID: e.UID, GID: e.GID, Owner: e.Owner, Group: e.Group,
		ModifiedAt: e.Modified.UTC().Format(time.RFC3339Nano), SymlinkTarget: e.SymlinkTarget}
}

// octalMode parses an optional octal mode of field.
func octalMode(field, s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, errdefs.Invalid(field, "syntax", "must be octal permission bits, such as 0644 or 755")
	}
	return uint32(m), nil
}

// boolQuery parses an optional boolean query parameter.
func boolQuery(c echo.Context, name string) (bool, error) {
	switch c.QueryParam(name) {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, errdefs.Invalid(name, "syntax", "must be true or false")
}

// APIStatFile reports one entry: GET /api/v1/sandboxes/:id/files/stat?path=.
func (h *Handlers) APIStatFile(c echo.Context) error {
	cl := CallerOf(c)
	e, err := h.sbx.Stat(c.Request().Context(), cl.Tenant.ID, c.Param("id"), c.QueryParam("path"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, entryJSON(e))
}

// APIListFiles lists a folder: GET /api/v1/sandboxes/:id/files/list?path=&depth=.
func (h *Handlers) APIListFiles(c echo.Context) error {
	cl := CallerOf(c)
	depth := 1
	if d := c.QueryParam("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil {
			return errdefs.Invalid("depth", "syntax", "must be a whole number")
		}
		depth = n
	}
	l, err := h.sbx.ListDir(c.Request().Context(), cl.Tenant.ID, c.Param("id"), c.QueryParam("path"), depth)
	if err != nil {
		return err
	}
	out := api.FileList{Path: c.QueryParam("path"), Entries: make([]api.FileEntry, 0, len(l.Entries)), Truncated: l.Truncated}
	for _, e := range l.Entries {
		out.Entries = append(out.Entries, entryJSON(e))
	}
	return c.JSON(http.StatusOK, out)
}

// APIMakeDir makes a folder with its parents: POST /api/v1/sandboxes/:id/files/mkdir.
func (h *Handlers) APIMakeDir(c echo.Context) error {
	var in api.MakeDir
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	mode, err := octalMode("mode", in.Mode)
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	e, created, err := h.sbx.MakeDir(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), in.Path, mode)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, api.MadeDir{Entry: entryJSON(e), Created: created})
}

// APIRemoveFile removes a file, link or folder:
// DELETE /api/v1/sandboxes/:id/files?path=&recursive=.
func (h *Handlers) APIRemoveFile(c echo.Context) error {
	cl := CallerOf(c)
	if err := h.sbx.CheckFiles(c.Request().Context(), cl.Tenant.ID, c.Param("id")); err != nil {
		return err
	}
	rec, err := boolQuery(c, "recursive")
	if err != nil {
		return err
	}
	if err := h.sbx.Remove(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), c.QueryParam("path"), rec); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// APIMoveFile renames: POST /api/v1/sandboxes/:id/files/move.
func (h *Handlers) APIMoveFile(c echo.Context) error {
	var in api.MoveFile
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	e, err := h.sbx.Move(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), in.Source, in.Destination)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, entryJSON(e))
}

// APIChmodFile sets permission bits: POST /api/v1/sandboxes/:id/files/chmod.
func (h *Handlers) APIChmodFile(c echo.Context) error {
	var in api.ChmodFile
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	cl := CallerOf(c)
	if err := h.sbx.CheckFiles(c.Request().Context(), cl.Tenant.ID, c.Param("id")); err != nil {
		return err
	}
	if in.Mode == "" {
		return errdefs.Invalid("mode", "required", "is required: octal permission bits, such as 0644")
	}
	mode, err := octalMode("mode", in.Mode)
	if err != nil {
		return err
	}
	e, err := h.sbx.Chmod(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), in.Path, mode)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, entryJSON(e))
}

// APIWatchFiles streams a folder's changes as Server-Sent Events:
// GET /api/v1/sandboxes/:id/files/watch?path=&recursive=. First "start"
// ({"path"}) once the sandbox watches, then one "fs" event per change
// (api.WatchEvent), comments every 15 s to keep the connection, and "end"
// (api.WatchEnd) when the folder or the sandbox goes. It ends when the
// client goes too. A refusal (not a folder, not running) comes before the
// stream as a problem document.
func (h *Handlers) APIWatchFiles(c echo.Context) error {
	cl := CallerOf(c)
	ctx := c.Request().Context()
	if err := h.sbx.CheckFiles(ctx, cl.Tenant.ID, c.Param("id")); err != nil {
		return err
	}
	rec, err := boolQuery(c, "recursive")
	if err != nil {
		return err
	}
	w, err := h.sbx.Watch(ctx, cl.Tenant.ID, c.Param("id"), c.QueryParam("path"), rec)
	if err != nil {
		return err
	}
	defer w.Close()
	resp := c.Response()
	resp.Header().Set(echo.HeaderContentType, "text/event-stream; charset=utf-8")
	resp.Header().Set(echo.HeaderCacheControl, "no-store")
	resp.Header().Set("X-Accel-Buffering", "no")
	resp.WriteHeader(http.StatusOK)
	send := func(event string, data any) bool {
		b, _ := json.Marshal(data)
		if _, err := fmt.Fprintf(resp, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		resp.Flush()
		return true
	}
	if !send("start", map[string]string{"path": c.QueryParam("path")}) {
		return nil
	}
	type batch struct {
		evs []sandbox.WatchEvent
		err error
	}
	next := make(chan batch)
	go func() {
		for {
			evs, err := w.Next()
			select {
			case next <- batch{evs, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if _, err := io.WriteString(resp, ": keepalive\n\n"); err != nil {
				return nil
			}
			resp.Flush()
		case b := <-next:
			if b.err != nil {
				reason := "the sandbox ended"
				if errdefs.IsNotFound(b.err) {
					reason = "the watched folder was removed or moved"
				}
				send("end", api.WatchEnd{Reason: reason})
				return nil
			}
			for _, ev := range b.evs {
				if !send("fs", api.WatchEvent{Name: ev.Name, Type: ev.Type, Dropped: ev.Dropped}) {
					return nil
				}
			}
		}
	}
}

// APIArchiveFiles sends a folder (or a file) as a tar stream:
// GET /api/v1/sandboxes/:id/files/archive?path=.
func (h *Handlers) APIArchiveFiles(c echo.Context) error {
	cl := CallerOf(c)
	_, err := h.sbx.ReadArchive(c.Request().Context(), cl.Actor(c), cl.Tenant.ID, c.Param("id"), c.QueryParam("path"),
		func(name string) (io.Writer, error) {
			hdr := c.Response().Header()
			hdr.Set(echo.HeaderContentType, api.MediaTar)
			if name == "/" {
				name = "root"
			}
			hdr.Set(echo.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": name + ".tar"}))
			c.Response().WriteHeader(http.StatusOK)
			return c.Response(), nil
		})
	if err != nil && c.Response().Committed {
		// Part of the tar is out: cut the response short, so the client
		// sees a broken stream rather than a short archive.
		h.log.Warn("archive cut short", "sandbox", c.Param("id"), "err", err)
		panic(http.ErrAbortHandler)
	}
	return err
}

// APIUploadFiles writes files from the body: POST /api/v1/sandboxes/:id/files.
// application/octet-stream: the body is the file ?path= (streamed).
// multipart/form-data: each part with a file name is a file, its name the
// path (absolute, or relative to ?path= or /workspace), written in order;
// each appears whole or not at all, and a refused part stops the upload
// (the ones before it stay). Each file is bounded by the file limit.
func (h *Handlers) APIUploadFiles(c echo.Context) error {
	cl := CallerOf(c)
	ctx := c.Request().Context()
	id := c.Param("id")
	if err := h.sbx.CheckFiles(ctx, cl.Tenant.ID, id); err != nil {
		return err
	}
	limit, err := h.sbx.FileLimit(ctx, cl.Tenant.ID)
	if err != nil {
		return err
	}
	mode, err := octalMode("mode", c.QueryParam("mode"))
	if err != nil {
		return err
	}
	written := func(fi sandbox.FileInfo) api.File {
		return api.File{Path: fi.Path, Size: fi.Size, Mode: fmt.Sprintf("%04o", fi.Mode&0o7777)}
	}
	tooLarge := func(err error) error {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return limit.TooLarge("upload", -1)
		}
		return err
	}
	mt, params, _ := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType))
	switch mt {
	case api.MediaBytes:
		if n := c.Request().ContentLength; n > limit.Bytes {
			return limit.TooLarge("upload", n)
		}
		body := http.MaxBytesReader(c.Response(), c.Request().Body, limit.Bytes+1)
		fi, err := h.sbx.WriteFile(ctx, cl.Actor(c), cl.Tenant.ID, id, c.QueryParam("path"), body, mode)
		if err != nil {
			return tooLarge(err)
		}
		return c.JSON(http.StatusOK, api.Uploaded{Files: []api.File{written(fi)}})
	case "multipart/form-data":
		if params["boundary"] == "" {
			return &errdefs.MalformedError{Field: "Content-Type", Detail: "multipart/form-data needs a boundary"}
		}
	default:
		return &errdefs.MalformedError{Field: "Content-Type", Detail: "must be application/octet-stream or multipart/form-data"}
	}
	base := strings.TrimSuffix(c.QueryParam("path"), "/")
	mr := multipart.NewReader(c.Request().Body, params["boundary"])
	out := api.Uploaded{Files: []api.File{}}
	for i := 0; ; i++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		field := fmt.Sprintf("file[%d]", i)
		if err != nil {
			return &errdefs.MalformedError{Field: field, Detail: "not a multipart part: " + err.Error()}
		}
		if i >= maxUploadParts {
			return errdefs.Invalid("file", "count", fmt.Sprintf("at most %d files in one upload", maxUploadParts))
		}
		// The raw file name: multipart's FileName keeps only its last element.
		_, disp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		name := disp["filename"]
		if name == "" {
			return &errdefs.MalformedError{Field: field, Detail: "a part without a file name (Content-Disposition filename=the path)"}
		}
		target := name
		if !strings.HasPrefix(name, "/") && base != "" {
			// Joined without cleaning, so a name that climbs is refused.
			target = base + "/" + name
		}
		fi, err := h.sbx.WriteFile(ctx, cl.Actor(c), cl.Tenant.ID, id, target, part, mode)
		part.Close()
		if err != nil {
			return tooLarge(err)
		}
		out.Files = append(out.Files, written(fi))
	}
	if len(out.Files) == 0 {
		return errdefs.Invalid("file", "required", "a multipart upload needs at least one part with a file name")
	}
	return c.JSON(http.StatusOK, out)
}
