package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/mail"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/web"
)

// config is the deployment configuration: environment first, flags override.
type config struct {
	Addr      string
	PublicURL string
	// InternalURL is where the other replicas reach this one (PostgreSQL).
	InternalURL string
	// PreviewDomain serves preview links at <port>-<sandbox id>.<domain>.
	PreviewDomain string
	DataDir       string
	DB            string
	OIDCIssuer    string
	OIDCClientID  string
	OIDCSecret    string
	AdminEmails   string
	LibvirtURIs   string
	SecretKey     string
	DomainType    string
	// HostFiles and HostPoolDir: where each host's VMs find the guest's
	// files (vmpool.ParseFilesModes) and the storage pool folder on remote hosts.
	HostFiles   string
	HostPoolDir string
	// EgressAllowCIDRs are operator ranges the egress gateway may reach
	// although private; loopback, unspecified and metadata ranges are
	// refused (netguard.ParseAllowance).
	EgressAllowCIDRs string
	// EgressRetentionDays is how long egress events are kept.
	EgressRetentionDays int
	// Terminal recordings: keystrokes too, and how long they are kept.
	RecordInput   bool
	RetentionDays int
	// Recording caps in MiB: per session and per tenant (negative: none).
	RecordingMaxMiB       int64
	RecordingTenantMaxMiB int64
	// Compliance: how often every tenant's checklist is re-evaluated, and
	// how often the probe runs per tenant (0 or less: on demand only).
	ComplianceInterval time.Duration
	ProbeInterval      time.Duration
	// ExecGrace is how long commands and terminals outlive a lost agent
	// session (a server restart) waiting to be re-attached.
	ExecGrace time.Duration
	// VMSnapshots restores VMs from memory snapshots instead of cold booting.
	VMSnapshots bool
	// VMSnapshotsShared: one snapshot per host and shape for every tenant.
	VMSnapshotsShared bool
	// ChannelDirect: agent channels of local hosts straight to QEMU's socket.
	ChannelDirect bool
	// PrestartPerTemplate is each VM's pre-started sandboxes per template
	// (STOCKADE_PRESTART_PER_TEMPLATE); 0 disables.
	PrestartPerTemplate int
	// MetricsTenants is how many tenants get their own label in the usage
	// metrics; the rest are summed under tenant="_other".
	MetricsTenants int
	// MetricsTokenFile holds the bearer token /metrics requires; empty:
	// /metrics answers loopback connections only.
	MetricsTokenFile string
	// GitHubAPI is the GitHub REST API base results are posted to, and
	// GitHubURL where workflow runs clone repositories from (GitHub
	// Enterprise Server, or a local server in tests).
	GitHubAPI string
	GitHubURL string
	// DevIdP allows the development identity provider on an address other
	// machines reach (--dev-idp, STOCKADE_DEV_IDP).
	DevIdP bool
	// envErrs are the environment values that did not parse, by flag name:
	// check reports them, naming the variable, instead of running with a
	// zero value, unless the flag overrode the variable.
	envErrs map[string]error
	fs      *flag.FlagSet
	// IncidentContacts (comma list of emails) and IncidentRunbookURL are
	// the platform's incident-response process, for tenants whose policy
	// names none.
	IncidentContacts   string
	IncidentRunbookURL string
	// MaxFileBytes bounds one file read or written through the files API.
	MaxFileBytes int64
	// TemplateRegistries and TemplateMaxUpload: OCI template imports.
	TemplateRegistries string
	TemplateMaxUpload  int64
}

// maxFileBytesBound is the most STOCKADE_MAX_FILE_BYTES may be: the guest
// agent's own bound on one file (sandbox/agent ManagerConfig.MaxFileBytes).
const maxFileBytesBound = 256 << 20

func (c *config) flags(fs *flag.FlagSet, getenv func(string) string) {
	c.fs = fs
	def := func(env, d string) string {
		if v := getenv(env); v != "" {
			return v
		}
		return d
	}
	fs.StringVar(&c.Addr, "addr", def("STOCKADE_ADDR", "127.0.0.1:8080"), "listen address (STOCKADE_ADDR)")
	fs.StringVar(&c.InternalURL, "internal-url", getenv("STOCKADE_INTERNAL_URL"), "URL the other replicas reach this one at (STOCKADE_INTERNAL_URL; PostgreSQL only; default http://ADDR)")
	fs.StringVar(&c.PublicURL, "public-url", getenv("STOCKADE_PUBLIC_URL"), "URL people reach the server at (STOCKADE_PUBLIC_URL; default http://ADDR)")
	fs.StringVar(&c.PreviewDomain, "preview-domain", getenv("STOCKADE_PREVIEW_DOMAIN"), "wildcard domain of sandbox port previews, <port>-<id>.DOMAIN (STOCKADE_PREVIEW_DOMAIN; empty: /preview/<token>/)")
	fs.StringVar(&c.DataDir, "data-dir", def("STOCKADE_DATA_DIR", "./var"), "data directory (STOCKADE_DATA_DIR)")
	fs.StringVar(&c.DB, "db", getenv("STOCKADE_DB"), "database: empty for SQLite in the data dir, or a postgres:// DSN (STOCKADE_DB)")
	fs.StringVar(&c.OIDCIssuer, "oidc-issuer", getenv("STOCKADE_OIDC_ISSUER"), "OIDC issuer URL; empty runs the development identity provider (STOCKADE_OIDC_ISSUER)")
	fs.StringVar(&c.OIDCClientID, "oidc-client-id", getenv("STOCKADE_OIDC_CLIENT_ID"), "OIDC client id (STOCKADE_OIDC_CLIENT_ID)")
	c.OIDCSecret = getenv("STOCKADE_OIDC_CLIENT_SECRET") // never a flag: it would show in ps
	fs.StringVar(&c.AdminEmails, "admin-emails", getenv("STOCKADE_ADMIN_EMAILS"), "comma-separated platform operator emails (STOCKADE_ADMIN_EMAILS)")
	fs.StringVar(&c.LibvirtURIs, "libvirt-uris", def("STOCKADE_LIBVIRT_URIS", "qemu:///system"), "comma-separated libvirt URIs (STOCKADE_LIBVIRT_URIS)")
	fs.StringVar(&c.HostFiles, "host-files", getenv("STOCKADE_HOST_FILES"), `per host, where its VMs find the guest image and templates: "URI=local" (the data dir's files, the host shares this disk) or "URI=remote" (a storage pool on the host, uploaded through libvirt), comma-separated (STOCKADE_HOST_FILES; default: local for qemu:///system and other URIs without a network transport, remote for qemu+tcp, +tls, +ssh)`)
	fs.StringVar(&c.HostPoolDir, "host-pool-dir", getenv("STOCKADE_HOST_POOL_DIR"), "folder of the installation's storage pool on each remote host (STOCKADE_HOST_POOL_DIR; default /var/lib/libvirt/stockade/<installation id>)")
	fs.StringVar(&c.DomainType, "domain-type", getenv("STOCKADE_DOMAIN_TYPE"), `force the VM domain type "kvm" or "qemu" (STOCKADE_DOMAIN_TYPE; default: detected with a real boot)`)
	fs.StringVar(&c.EgressAllowCIDRs, "egress-allow-cidrs", getenv("STOCKADE_EGRESS_ALLOW_CIDRS"), `comma list of private ranges sandboxes may reach through the egress gateway (STOCKADE_EGRESS_ALLOW_CIDRS; default none: private, link-local, CGNAT and reserved addresses are blocked; loopback, unspecified and metadata ones can never be allowed)`)
	fs.IntVar(&c.EgressRetentionDays, "egress-retention-days", c.envInt(getenv, "egress-retention-days", "STOCKADE_EGRESS_RETENTION_DAYS", 90), "days egress events are kept (STOCKADE_EGRESS_RETENTION_DAYS)")
	fs.BoolVar(&c.RecordInput, "record-input", c.envBool(getenv, "record-input", "STOCKADE_RECORD_INPUT", false),
		"record terminal keystrokes as well as output (STOCKADE_RECORD_INPUT)")
	fs.IntVar(&c.RetentionDays, "recording-retention-days", c.envInt(getenv, "recording-retention-days", "STOCKADE_RECORDING_RETENTION_DAYS", 90),
		"days terminal recordings are kept (STOCKADE_RECORDING_RETENTION_DAYS)")
	fs.DurationVar(&c.ComplianceInterval, "compliance-interval", c.envDuration(getenv, "compliance-interval", "STOCKADE_COMPLIANCE_INTERVAL", 5*time.Minute),
		"how often each tenant's compliance checklist is re-evaluated (STOCKADE_COMPLIANCE_INTERVAL)")
	fs.DurationVar(&c.ProbeInterval, "probe-interval", c.envDuration(getenv, "probe-interval", "STOCKADE_PROBE_INTERVAL", 24*time.Hour),
		"how often the compliance probe runs in a sandbox of each tenant; 0: on demand only (STOCKADE_PROBE_INTERVAL)")
	fs.DurationVar(&c.ExecGrace, "exec-grace", c.envDuration(getenv, "exec-grace", "STOCKADE_EXEC_GRACE", 5*time.Minute),
		"how long running commands and terminals survive a lost agent session (a server restart) waiting to be re-attached; their output is buffered up to 1 MiB each (STOCKADE_EXEC_GRACE)")
	fs.BoolVar(&c.VMSnapshots, "vm-snapshots", c.envBool(getenv, "vm-snapshots", "STOCKADE_VM_SNAPSHOTS", true),
		"restore VMs from a memory snapshot of a booted guest instead of cold booting them; false: always cold boot (STOCKADE_VM_SNAPSHOTS)")
	fs.BoolVar(&c.VMSnapshotsShared, "vm-snapshots-shared", c.envBool(getenv, "vm-snapshots-shared", "STOCKADE_VM_SNAPSHOTS_SHARED", false),
		"one memory snapshot per host and VM shape for every tenant; false: one per tenant, so no two tenants' VMs share the guest kernel's boot-time secrets (STOCKADE_VM_SNAPSHOTS_SHARED)")
	fs.BoolVar(&c.ChannelDirect, "channel-direct", c.envBool(getenv, "channel-direct", "STOCKADE_CHANNEL_DIRECT", true),
		"on local libvirt URIs, connect to each VM's agent channel socket directly instead of through libvirtd's stream API; remote URIs always use the stream; every server of an installation on one host must use the same setting (STOCKADE_CHANNEL_DIRECT)")
	fs.IntVar(&c.PrestartPerTemplate, "prestart-per-template", c.envInt(getenv, "prestart-per-template", "STOCKADE_PRESTART_PER_TEMPLATE", sandbox.DefaultPrestartPerTemplate),
		"sandboxes each VM keeps started per template, claimed by creates without volumes; 0 disables (STOCKADE_PRESTART_PER_TEMPLATE)")
	fs.IntVar(&c.MetricsTenants, "metrics-tenants", c.envInt(getenv, "metrics-tenants", "STOCKADE_METRICS_TENANTS", 200),
		`tenants with a label of their own in the per-tenant /metrics, costliest first; the rest are summed under tenant="_other" (STOCKADE_METRICS_TENANTS)`)
	fs.BoolVar(&c.DevIdP, "dev-idp", c.envBool(getenv, "dev-idp", "STOCKADE_DEV_IDP", false),
		"run the development identity provider (anyone signs in as any email, no password) even on a non-loopback address (STOCKADE_DEV_IDP)")
	fs.Int64Var(&c.RecordingMaxMiB, "recording-max-mib", int64(c.envInt(getenv, "recording-max-mib", "STOCKADE_RECORDING_MAX_MIB", 50)),
		"MiB one terminal recording may take; past it the terminal goes on unrecorded, marked in the recording; -1: no cap (STOCKADE_RECORDING_MAX_MIB)")
	fs.Int64Var(&c.RecordingTenantMaxMiB, "recording-tenant-max-mib", int64(c.envInt(getenv, "recording-tenant-max-mib", "STOCKADE_RECORDING_TENANT_MAX_MIB", 5120)),
		"MiB one tenant's terminal recordings may take together; -1: no cap (STOCKADE_RECORDING_TENANT_MAX_MIB)")
	fs.StringVar(&c.MetricsTokenFile, "metrics-token-file", getenv("STOCKADE_METRICS_TOKEN_FILE"), "file holding the bearer token Prometheus sends to /metrics (STOCKADE_METRICS_TOKEN_FILE; default: /metrics answers this machine only)")
	fs.StringVar(&c.GitHubAPI, "github-api", def("STOCKADE_GITHUB_API", "https://api.github.com"), "GitHub REST API base that workflow results are posted to (STOCKADE_GITHUB_API)")
	fs.StringVar(&c.GitHubURL, "github-url", def("STOCKADE_GITHUB_URL", "https://github.com"), "where workflow runs clone repositories from, as URL/owner/name.git (STOCKADE_GITHUB_URL)")
	fs.StringVar(&c.IncidentContacts, "incident-contacts", getenv("STOCKADE_INCIDENT_CONTACTS"), "comma list of emails that respond to a tenant's incident when its policy names none (STOCKADE_INCIDENT_CONTACTS)")
	fs.StringVar(&c.IncidentRunbookURL, "incident-runbook-url", getenv("STOCKADE_INCIDENT_RUNBOOK_URL"), "the platform's runbook for a compromised agent, for tenants whose policy links none (STOCKADE_INCIDENT_RUNBOOK_URL)")
	fs.Int64Var(&c.MaxFileBytes, "max-file-bytes", int64(c.envInt(getenv, "max-file-bytes", "STOCKADE_MAX_FILE_BYTES", 64<<20)), "largest file read or written through the files API, in bytes; a tenant policy's filesystem.max_file_bytes may lower it (STOCKADE_MAX_FILE_BYTES)")
	fs.StringVar(&c.TemplateRegistries, "template-registries", getenv("STOCKADE_TEMPLATE_REGISTRIES"), "comma list of registry hosts tenants may pull template images from, through their egress policy (STOCKADE_TEMPLATE_REGISTRIES; default none)")
	fs.Int64Var(&c.TemplateMaxUpload, "template-max-upload-bytes", int64(c.envInt(getenv, "template-max-upload-bytes", "STOCKADE_TEMPLATE_MAX_UPLOAD_BYTES", 2<<30)), "largest image upload or pull for a template, in bytes (STOCKADE_TEMPLATE_MAX_UPLOAD_BYTES)")
	fs.StringVar(&c.SecretKey, "secret-key", getenv("STOCKADE_SECRET_KEY"), "key file for encrypting secrets at rest (STOCKADE_SECRET_KEY; default DATA_DIR/secret.key, created)")
}

func (c *config) envErr(flagName string, err error) {
	if c.envErrs == nil {
		c.envErrs = map[string]error{}
	}
	c.envErrs[flagName] = err
}

// envInt reads an integer variable; a value that does not parse is kept
// for check to report.
func (c *config) envInt(getenv func(string) string, flagName, name string, def int) int {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		c.envErr(flagName, fmt.Errorf("%s %q: must be a whole number such as %d", name, v, def))
		return def
	}
	return n
}

// envDuration reads a duration variable ("5m", "24h"); "0" is zero.
func (c *config) envDuration(getenv func(string) string, flagName, name string, def time.Duration) time.Duration {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		c.envErr(flagName, fmt.Errorf("%s %q: must be a duration such as %s", name, v, def))
		return def
	}
	return d
}

// envBool reads a boolean variable: true/false, 1/0 (strconv.ParseBool).
func (c *config) envBool(getenv func(string) string, flagName, name string, def bool) bool {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		c.envErr(flagName, fmt.Errorf("%s %q: must be true or false", name, v))
		return def
	}
	return b
}

// checkGitHubURL refuses what does not belong in a base URL: credentials
// (they would end up in clone URLs and logs), a query, a fragment, and a
// path other than the ones allowed ("" and "/"; the API also "/api/v3",
// GitHub Enterprise Server's).
func checkGitHubURL(name, v string, paths ...string) (string, error) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s %q: must be an http(s) URL", name, v)
	}
	switch {
	case u.User != nil:
		return "", fmt.Errorf("%s: must not carry credentials (user:password@); secrets go in the tenant's secrets", name)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(v, "#"):
		return "", fmt.Errorf("%s: must not have a query or fragment (%s://%s...)", name, u.Scheme, u.Host)
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	if p != "" && !slices.Contains(paths, p) {
		want := "no path"
		if len(paths) > 0 {
			want = "no path or " + strings.Join(paths, ", ")
		}
		return "", fmt.Errorf("%s %q: must be a base URL with %s", name, v, want)
	}
	return u.Scheme + "://" + u.Host + p, nil
}

// devIdPReach is why the development identity provider may not run here:
// "" when STOCKADE_ADDR and STOCKADE_PUBLIC_URL are both loopback.
func (c *config) devIdPReach() string {
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil || !web.LoopbackHost(host) {
		return fmt.Sprintf("STOCKADE_ADDR %q is not a loopback address", c.Addr)
	}
	if !web.LoopbackURL(c.PublicURL) {
		return fmt.Sprintf("STOCKADE_PUBLIC_URL %q is not a loopback URL", c.PublicURL)
	}
	return ""
}

func (c *config) check() error {
	if c.fs != nil {
		c.fs.Visit(func(f *flag.Flag) { delete(c.envErrs, f.Name) }) // the flag wins
	}
	if len(c.envErrs) > 0 {
		names := make([]string, 0, len(c.envErrs))
		for n := range c.envErrs {
			names = append(names, n)
		}
		sort.Strings(names)
		errs := make([]error, len(names))
		for i, n := range names {
			errs[i] = c.envErrs[n]
		}
		return errors.Join(errs...)
	}
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Addr
	}
	u, err := url.Parse(c.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("STOCKADE_PUBLIC_URL %q: must be an http(s) URL", c.PublicURL)
	}
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	if c.GitHubAPI, err = checkGitHubURL("STOCKADE_GITHUB_API", c.GitHubAPI, "/api/v3"); err != nil {
		return err
	}
	if c.GitHubURL, err = checkGitHubURL("STOCKADE_GITHUB_URL", c.GitHubURL); err != nil {
		return err
	}
	if c.RetentionDays <= 0 {
		return errors.New("STOCKADE_RECORDING_RETENTION_DAYS: must be a positive number of days such as 90")
	}
	if err := c.checkIncident(); err != nil {
		return err
	}
	if c.ComplianceInterval <= 0 {
		return errors.New("STOCKADE_COMPLIANCE_INTERVAL: must be a positive duration such as 5m")
	}
	if c.PrestartPerTemplate < 0 || c.PrestartPerTemplate > agentproto.MaxPrestartPerTemplate {
		return fmt.Errorf("STOCKADE_PRESTART_PER_TEMPLATE: must be 0 (off) to %d", agentproto.MaxPrestartPerTemplate)
	}
	if c.EgressRetentionDays <= 0 {
		return errors.New("STOCKADE_EGRESS_RETENTION_DAYS: must be a positive number of days such as 90")
	}
	for name, v := range map[string]int64{"STOCKADE_RECORDING_MAX_MIB": c.RecordingMaxMiB, "STOCKADE_RECORDING_TENANT_MAX_MIB": c.RecordingTenantMaxMiB} {
		if v == 0 || v < -1 {
			return fmt.Errorf("%s: must be a positive number of MiB such as 50, or -1 for no cap", name)
		}
	}
	if c.MetricsTenants <= 0 {
		return errors.New("STOCKADE_METRICS_TENANTS: must be a positive number such as 200")
	}
	if c.MaxFileBytes < 1 || c.MaxFileBytes > maxFileBytesBound {
		return fmt.Errorf("STOCKADE_MAX_FILE_BYTES: must be a number of bytes from 1 to %d (256 MiB, the guest agent's bound), such as 67108864 (64 MiB)", maxFileBytesBound)
	}
	if c.TemplateMaxUpload < 1 {
		return errors.New("STOCKADE_TEMPLATE_MAX_UPLOAD_BYTES: must be a positive number of bytes, such as 2147483648 (2 GiB)")
	}
	if _, err := oci.ParseRegistries(c.TemplateRegistries); err != nil {
		return err
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = -1 // on demand only
	}
	if _, err := vmpool.ParseFilesModes("STOCKADE_HOST_FILES", c.HostFiles); err != nil {
		return err
	}
	if c.HostPoolDir != "" && !filepath.IsAbs(c.HostPoolDir) {
		return fmt.Errorf("STOCKADE_HOST_POOL_DIR %q: must be an absolute path on the hosts", c.HostPoolDir)
	}
	if c.DomainType != "" && c.DomainType != "kvm" && c.DomainType != "qemu" {
		return fmt.Errorf("STOCKADE_DOMAIN_TYPE %q: must be kvm, qemu or empty (detect)", c.DomainType)
	}
	if c.OIDCIssuer != "" && c.OIDCClientID == "" {
		return errors.New("STOCKADE_OIDC_ISSUER is set but STOCKADE_OIDC_CLIENT_ID is empty")
	}
	if c.OIDCIssuer != "" && c.DevIdP {
		return errors.New("--dev-idp (STOCKADE_DEV_IDP) and STOCKADE_OIDC_ISSUER exclude each other: choose one identity provider")
	}
	// The development provider signs anyone in as any email, operators
	// included, with no password: only this machine may reach it, unless
	// the operator says otherwise in so many words.
	if why := c.devIdPReach(); c.OIDCIssuer == "" && !c.DevIdP && why != "" {
		return fmt.Errorf("no STOCKADE_OIDC_ISSUER, so the development identity provider would run, and %s: "+
			"anyone who reaches it could sign in as any email, platform operators included, without a password; "+
			"set STOCKADE_OIDC_ISSUER (see README \"Using a real identity provider\"), listen on 127.0.0.1, "+
			"or pass --dev-idp (STOCKADE_DEV_IDP=true) to run it there anyway", why)
	}
	// Traversable but not listable: QEMU runs as its own user and must reach
	// the guest image below; every secret inside is a 0600 file.
	if err := os.MkdirAll(c.DataDir, 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if st, err := os.Stat(c.DataDir); err == nil && st.Mode().Perm()&0o011 != 0o011 {
		if err := os.Chmod(c.DataDir, st.Mode().Perm()|0o011); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
	}
	if c.SecretKey == "" {
		c.SecretKey = filepath.Join(c.DataDir, "secret.key")
	}
	return nil
}

func (c *config) operatorEmails() map[string]bool {
	out := map[string]bool{}
	for _, e := range strings.Split(c.AdminEmails, ",") {
		if e = strings.ToLower(strings.TrimSpace(e)); e != "" {
			out[e] = true
		}
	}
	return out
}

// operatorList is the platform operators' emails, sorted.
func (c *config) operatorList() []string {
	out := make([]string, 0)
	for e := range c.operatorEmails() {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}

func (c *config) secure() bool { return strings.HasPrefix(c.PublicURL, "https://") }

// rootKey reads the secret key file, creating it (0600) on first start.
func (c *config) rootKey() ([]byte, error) {
	b, err := os.ReadFile(c.SecretKey)
	if errors.Is(err, fs.ErrNotExist) {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := os.WriteFile(c.SecretKey, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("create secret key %s: %w", c.SecretKey, err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read secret key %s: %w", c.SecretKey, err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < 32 {
		return nil, fmt.Errorf("secret key %s: must hold at least 32 bytes as hex", c.SecretKey)
	}
	return key, nil
}

// mib is n MiB in bytes; negative stays negative (no cap).
func mib(n int64) int64 {
	if n < 0 {
		return -1
	}
	return n << 20
}

// checkIncident refuses platform incident contacts that are not bare email
// addresses and a runbook that is not an http(s) URL.
func (c *config) checkIncident() error {
	for _, e := range splitList(c.IncidentContacts) {
		if a, err := mail.ParseAddress(e); err != nil || a.Address != e || a.Name != "" {
			return fmt.Errorf("STOCKADE_INCIDENT_CONTACTS: %q is not an email address", e)
		}
	}
	if c.IncidentRunbookURL = strings.TrimSpace(c.IncidentRunbookURL); c.IncidentRunbookURL != "" {
		u, err := url.Parse(c.IncidentRunbookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fmt.Errorf("STOCKADE_INCIDENT_RUNBOOK_URL %q: must be an http(s) URL", c.IncidentRunbookURL)
		}
	}
	return nil
}
