package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers"
)

// templateUploadLimit bounds the bodies of the image upload routes at
// their own limit (they skip BodyLimit): a declared length over it is
// refused before anything is read, and a body that passes it is cut off.
// It runs before the CSRF check, which parses a browser's form.
func (s *Server) templateUploadLimit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Request().Method != http.MethodPost || (c.Path() != handlers.TemplateImportPath && c.Path() != handlers.TemplateImportPage) {
			return next(c)
		}
		limit := s.handlers.TemplateUploadLimit()
		if n := c.Request().ContentLength; n > limit {
			return s.handlers.TemplateUploadTooLarge(n)
		}
		c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, limit)
		return next(c)
	}
}
