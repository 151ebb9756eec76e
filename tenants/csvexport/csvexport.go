// Package csvexport writes the CSV of every export (audit log, usage and
// billing): RFC 4180 through encoding/csv, with every cell a spreadsheet
// would read as a formula defused. Following OWASP's guidance on CSV
// injection, a cell that starts with = + - @ TAB or CR gets a leading
// single quote, which spreadsheets show as text and never evaluate. The
// check reads only the first byte, so it costs next to nothing on a large
// export.
package csvexport

import (
	"encoding/csv"
	"io"
)

// Writer writes records with their cells defused.
type Writer struct {
	w   *csv.Writer
	rec []string
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: csv.NewWriter(w)} }

// Risky reports a cell a spreadsheet would take for a formula (or that
// hides one behind a tab or carriage return).
func Risky(s string) bool {
	if s == "" {
		return false
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return true
	}
	return false
}

// Cell is s as it is safe to put in a cell: with a leading ' when Risky.
func Cell(s string) string {
	if Risky(s) {
		return "'" + s
	}
	return s
}

// Write writes one record, each risky cell defused; rec is left as it is.
func (w *Writer) Write(rec []string) error {
	out := rec
	for i, s := range rec {
		if !Risky(s) {
			continue
		}
		if &out[0] == &rec[0] {
			w.rec = append(w.rec[:0], rec...)
			out = w.rec
		}
		out[i] = "'" + s
	}
	return w.w.Write(out)
}

// Flush writes any buffered data to the underlying writer.
func (w *Writer) Flush() { w.w.Flush() }

// Error reports an error of an earlier Write or Flush.
func (w *Writer) Error() error { return w.w.Error() }
