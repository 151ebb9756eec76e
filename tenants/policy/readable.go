package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Readable is a Change for people: the field's label and its values as
// words ("512 MiB", "1 h", "yes"); a list says which entries it gains and
// loses instead of repeating both lists.
type Readable struct {
	Path  string
	Label string // the field's label; the path when no field describes it
	List  bool
	// Old and New are the values of a setting that is no list.
	Old, New string
	// Added and Removed are the entries a list gains and loses; both empty
	// when only their order changed.
	Added, Removed []string
}

// String is one line: "Default memory: 512 MiB → 1024 MiB",
// "Egress allowlist: + registry.npmjs.org".
func (r Readable) String() string {
	if !r.List {
		return r.Label + ": " + r.Old + " → " + r.New
	}
	var parts []string
	for _, a := range r.Added {
		parts = append(parts, "+ "+a)
	}
	for _, a := range r.Removed {
		parts = append(parts, "− "+a)
	}
	if len(parts) == 0 {
		parts = []string{"same entries, new order"}
	}
	return r.Label + ": " + strings.Join(parts, ", ")
}

// Describe makes changes readable, in the order the policy page shows
// their fields (paths no field describes last, in their order).
func Describe(changes []Change) []Readable {
	order := map[string]int{}
	for _, s := range Sections() {
		for _, f := range s.Fields {
			order[f.Path] = len(order)
		}
	}
	rank := func(path string) int {
		if i, ok := order[path]; ok {
			return i
		}
		return len(order)
	}
	out := make([]Readable, 0, len(changes))
	for _, c := range changes {
		out = append(out, describe(c))
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i].Path) < rank(out[j].Path) })
	return out
}

func describe(c Change) Readable {
	f, ok := FieldAt(c.Path)
	if !ok {
		f = Field{Path: c.Path, Label: c.Path}
	}
	r := Readable{Path: c.Path, Label: f.Label}
	if f.Kind == KindLines || f.Kind == KindRules {
		r.List = true
		olds, news := entries(f, c.Old), entries(f, c.New)
		r.Added, r.Removed = minus(news, olds), minus(olds, news)
		return r
	}
	r.Old, r.New = Value(f, c.Old), Value(f, c.New)
	return r
}

// Value is one JSON value of field f as words; "—" for none (a setting
// the other document lacks).
func Value(f Field, raw json.RawMessage) string {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "—"
	}
	switch f.Kind {
	case KindBool:
		var b bool
		if json.Unmarshal(raw, &b) == nil {
			if b {
				return "yes"
			}
			return "no"
		}
	case KindInt:
		var n int64
		if json.Unmarshal(raw, &n) == nil {
			return quantity(f, n)
		}
	case KindEnum, KindText:
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if s == "" {
				return "none"
			}
			return s
		}
	case KindLines, KindRules:
		if es := entries(f, raw); len(es) > 0 {
			return strings.Join(es, ", ")
		}
		return "none"
	}
	return string(raw)
}

// quantity is n in f's unit: sizes and durations in the largest unit that
// divides them ("64 MiB", "4 h"), with what zero means.
func quantity(f Field, n int64) string {
	if n == 0 && f.Zero != "" {
		return "0 (" + f.Zero + ")"
	}
	switch f.Unit {
	case UnitBytes:
		switch {
		case n != 0 && n%(1<<30) == 0:
			return strconv.FormatInt(n>>30, 10) + " GiB"
		case n != 0 && n%(1<<20) == 0:
			return strconv.FormatInt(n>>20, 10) + " MiB"
		case n != 0 && n%(1<<10) == 0:
			return strconv.FormatInt(n>>10, 10) + " KiB"
		}
		return strconv.FormatInt(n, 10) + " bytes"
	case UnitSeconds:
		switch {
		case n != 0 && n%86400 == 0:
			return plural(n/86400, "day", "days")
		case n != 0 && n%3600 == 0:
			return strconv.FormatInt(n/3600, 10) + " h"
		case n != 0 && n%60 == 0:
			return strconv.FormatInt(n/60, 10) + " min"
		}
		return strconv.FormatInt(n, 10) + " s"
	case UnitDays:
		return plural(n, "day", "days")
	case UnitNone:
		return strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10) + " " + string(f.Unit)
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(n, 10) + " " + many
}

// entries are a list's items as words: a rule reads "api.github.com" (every
// port) or "api.github.com port 443" / "ports 443, 8443".
func entries(f Field, raw json.RawMessage) []string {
	if f.Kind == KindRules {
		var rules []Rule
		if json.Unmarshal(raw, &rules) != nil {
			return nil
		}
		out := make([]string, 0, len(rules))
		for _, r := range rules {
			out = append(out, ruleText(r))
		}
		return out
	}
	var list []string
	if json.Unmarshal(raw, &list) != nil {
		return nil
	}
	return list
}

func ruleText(r Rule) string {
	if len(r.Ports) == 0 {
		return r.Domain
	}
	ps := make([]string, 0, len(r.Ports))
	for _, p := range r.Ports {
		ps = append(ps, strconv.Itoa(p))
	}
	word := "port"
	if len(ps) > 1 {
		word = "ports"
	}
	return fmt.Sprintf("%s %s %s", r.Domain, word, strings.Join(ps, ", "))
}

// minus is a's entries that b lacks, in a's order.
func minus(a, b []string) []string {
	in := make(map[string]bool, len(b))
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}
