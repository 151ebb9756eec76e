package handlers

// each converts a list of domain values to their wire types, never nil (an
// empty list is [] in the JSON, as the document's nonnull lists say).
func each[T, W any](xs []T, wire func(T) W) []W {
	out := make([]W, 0, len(xs))
	for _, x := range xs {
		out = append(out, wire(x))
	}
	return out
}
