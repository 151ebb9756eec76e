// Package secrets holds a tenant's credentials so agents can use them without
// reading them: values encrypted at rest (AES-256-GCM, key derived from the
// root key), each scoped to hosts and to the places in a request it may go
// (the Authorization header by default), with an expiry, revocable;
// per-sandbox placeholders that stand for a value inside the sandbox; and a
// per-tenant certificate authority the egress gateway uses to terminate TLS
// towards the scoped hosts and swap each placeholder for its value there, and
// only there.
//
// Values leave this package only on the host: to the egress gateway
// (Credentials: to inject towards a host the secret is scoped to, and to
// recognise in that host's answers and rewrite back to the placeholder), and
// to the control plane's own signing (ForHost). Audit records name secrets,
// never their values.
package secrets
