package handlers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Creates that take an Idempotency-Key (Idempotent's kind).
const (
	IdemSandbox = "sandbox"
	IdemVM      = "vm"
	IdemRun     = "run"
	// IdemToken: the answer holds the new token; it is cached sealed under
	// the secrets key, and refused on a server without one.
	IdemToken = "token"
)

const (
	maxIdempotencyKey = 255
	idemKeyContext    = "stockade.idempotency_key"
	idemSealPurpose   = "idempotency-response"
)

// IdempotencyKeyOf is the Idempotency-Key of the request, once Idempotent
// accepted it ("" without one).
func IdempotencyKeyOf(c echo.Context) string {
	k, _ := c.Get(idemKeyContext).(string)
	return k
}

func checkIdempotencyKey(k string) error {
	if len(k) > maxIdempotencyKey {
		return errdefs.Invalid(tenants.IdempotencyField, "syntax", fmt.Sprintf("at most %d characters", maxIdempotencyKey))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return errdefs.Invalid(tenants.IdempotencyField, "syntax", "printable ASCII without spaces (a UUID, say)")
		}
	}
	return nil
}

// IdempotencyHash identifies a request: a key reused for a request with
// another hash is refused.
func IdempotencyHash(method, path, rawQuery string, body []byte) string {
	sum := sha256.New()
	for _, part := range []string{method, path, rawQuery} {
		sum.Write([]byte(part))
		sum.Write([]byte{0})
	}
	sum.Write(body)
	return hex.EncodeToString(sum.Sum(nil))
}

// Idempotent wraps a create route (kind: IdemSandbox ...). A request with an
// Idempotency-Key runs once per tenant, caller, route and key: a retry within
// 24 h gets the first answer again (with Idempotent-Replayed: true) and makes
// nothing new; the same key with another body is a 422 naming the header; a
// retry while the first still runs is a 409. Only successful answers are
// kept: after a failure the key is free and a retry runs again. A key left
// pending by a server that stopped mid-request is taken over; a sandbox
// that request already recorded (found by its key) is the answer.
func (h *Handlers) Idempotent(kind string, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key := c.Request().Header.Get(api.IdempotencyHeader)
		if key == "" {
			return next(c)
		}
		if err := checkIdempotencyKey(key); err != nil {
			return err
		}
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return jsonError(err)
		}
		c.Request().Body = io.NopCloser(bytes.NewReader(body))
		c.Request().ContentLength = int64(len(body))
		cl := CallerOf(c)
		route := c.Request().Method + " " + c.Path()
		req := tenants.IdemRequest{TenantID: cl.Tenant.ID, Principal: cl.Actor(c).ID, Route: route, Key: key,
			RequestHash: IdempotencyHash(c.Request().Method, c.Request().URL.Path, c.Request().URL.RawQuery, body), Owner: h.instance}
		ctx := c.Request().Context()
		k, begun, err := h.store.BeginIdempotent(ctx, req)
		if err != nil {
			return err
		}
		if !begun && k.State == tenants.IdemDone {
			return h.replay(c, k)
		}
		if !begun {
			// Pending in a server that stopped mid-request.
			if kind == IdemSandbox {
				if done, err := h.recoverSandbox(c, k); done || err != nil {
					return err
				}
			}
			ok, err := h.store.TakeOverIdempotent(ctx, k, h.instance)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: a request with this Idempotency-Key is still in progress; retry once it has answered", errdefs.ErrConflict)
			}
		}
		return h.runIdempotent(c, k, kind, key, next)
	}
}

// runIdempotent runs the request a key begun and keeps its answer.
func (h *Handlers) runIdempotent(c echo.Context, k tenants.IdemKey, kind, key string, next echo.HandlerFunc) error {
	c.Set(idemKeyContext, key)
	rec := &recorder{ResponseWriter: c.Response().Writer}
	c.Response().Writer = rec
	err := next(c)
	c.Response().Writer = rec.ResponseWriter
	// The answer is kept even when the caller went away meanwhile: that is
	// what its retry will want.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), 10*time.Second)
	defer cancel()
	status := c.Response().Status
	if err != nil || status < 200 || status > 299 {
		if aerr := h.store.AbandonIdempotent(sctx, k.ID); aerr != nil {
			h.log.Warn("forget idempotency key", "err", aerr)
		}
		return err
	}
	body, sealed := rec.buf.String(), false
	if kind == IdemToken {
		if body, err = h.secrets.Seal(idemSealPurpose, k.TenantID, k.ID, rec.buf.Bytes()); err != nil {
			h.log.Error("seal idempotent answer", "err", err)
			body = ""
		}
		sealed = true
	}
	if body != "" {
		err = h.store.CompleteIdempotent(sctx, k.ID, status, c.Response().Header().Get(echo.HeaderLocation), body, sealed)
	} else {
		err = h.store.AbandonIdempotent(sctx, k.ID)
	}
	if err != nil {
		h.log.Warn("store idempotent answer", "err", err)
	}
	return nil
}

// replay answers what the first request with the key answered.
func (h *Handlers) replay(c echo.Context, k tenants.IdemKey) error {
	body := []byte(k.ResponseBody)
	if k.Sealed {
		var err error
		if body, err = h.secrets.Open(idemSealPurpose, k.TenantID, k.ID, k.ResponseBody); err != nil {
			return fmt.Errorf("replay idempotent answer: %w", err)
		}
	}
	hdr := c.Response().Header()
	if k.Location != "" {
		hdr.Set(echo.HeaderLocation, k.Location)
	}
	hdr.Set(api.ReplayedHeader, "true")
	if k.Sealed {
		hdr.Set("Cache-Control", "no-store")
	}
	return c.Blob(k.StatusCode, echo.MIMEApplicationJSON, bytes.TrimRight(body, "\n"))
}

// recoverSandbox answers a retry whose first request a stopped server was
// running: the sandbox it recorded (the next start adopted or failed it) is
// the answer, kept for later retries. done is false when that request had
// recorded nothing: the retry then runs.
func (h *Handlers) recoverSandbox(c echo.Context, k tenants.IdemKey) (bool, error) {
	sb, err := h.sbx.Store().ByIdempotencyKey(c.Request().Context(), k.TenantID, k.Principal, k.Key)
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	switch sb.State {
	case sandbox.StateCreating:
		return true, fmt.Errorf("%w: the sandbox of this Idempotency-Key (%s) is still being created; retry later", errdefs.ErrConflict, sb.ID)
	case sandbox.StateRunning:
	default:
		return false, nil // it never ran, or ended: like any failed create, the retry runs again
	}
	ok, err := h.store.TakeOverIdempotent(c.Request().Context(), k, h.instance)
	if err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: a request with this Idempotency-Key is still in progress; retry once it has answered", errdefs.ErrConflict)
		}
		return true, err
	}
	return true, h.runIdempotent(c, k, IdemSandbox, k.Key, func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderLocation, "/api/v1/sandboxes/"+sb.ID)
		return c.JSON(http.StatusCreated, sandboxJSON(sb))
	})
}

// recorder keeps a copy of what a handler writes.
type recorder struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.buf.Write(p)
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
