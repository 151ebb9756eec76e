package api

// PortParams are the path parameters of a sandbox port route.
type PortParams struct {
	Port int `path:"port" minimum:"1" maximum:"65535" doc:"the TCP port a process listens on inside the sandbox (127.0.0.1)"`
}

// CreatePreviewLink is the body of POST /api/v1/sandboxes/{id}/previews.
type CreatePreviewLink struct {
	Port       int `json:"port" minimum:"1" maximum:"65535" doc:"the sandbox port the link opens"`
	TTLSeconds int `json:"ttl_seconds,omitempty" minimum:"60" maximum:"604800" doc:"how long the link works, default 3600"`
}

// PreviewLink is a preview link of a sandbox port. URL (with its token) is
// only in the answer that created it.
type PreviewLink struct {
	ID        string  `json:"id"`
	SandboxID string  `json:"sandbox_id"`
	Port      int     `json:"port"`
	URL       string  `json:"url,omitempty" format:"uri" doc:"the link, token included: shown once, at creation"`
	CreatedBy string  `json:"created_by"`
	CreatedAt string  `json:"created_at" format:"date-time"`
	ExpiresAt string  `json:"expires_at" format:"date-time"`
	RevokedAt *string `json:"revoked_at" format:"date-time"`
	Active    bool    `json:"active" doc:"neither revoked nor expired"`
}

// PreviewLinkList lists a sandbox's preview links, newest first.
type PreviewLinkList struct {
	Links []PreviewLink `json:"links" nonnull:"true"`
}

// PortURL is where a sandbox port is reached (stockade sandbox port).
type PortURL struct {
	URL string `json:"url" format:"uri"`
}
