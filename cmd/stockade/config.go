package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// config is the deployment configuration: environment first, flags override.
type config struct {
	Addr         string
	PublicURL    string
	DataDir      string
	DB           string
	OIDCIssuer   string
	OIDCClientID string
	OIDCSecret   string
	AdminEmails  string
	LibvirtURIs  string
	SecretKey    string
	DomainType   string
	// EgressAllowCIDRs are operator ranges the egress gateway may reach
	// although private (test-only use: 127.0.0.0/8).
	EgressAllowCIDRs string
	// Terminal recordings: keystrokes too, and how long they are kept.
	RecordInput   bool
	RetentionDays int
	// Compliance: how often every tenant's checklist is re-evaluated, and
	// how often the probe runs per tenant (0 or less: on demand only).
	ComplianceInterval time.Duration
	ProbeInterval      time.Duration
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
	// MaxFileBytes bounds one file read or written through the files API.
	MaxFileBytes int64
}

// maxFileBytesBound is the most STOCKADE_MAX_FILE_BYTES may be: the guest
// agent's own bound on one file (sandbox/agent ManagerConfig.MaxFileBytes).
const maxFileBytesBound = 256 << 20

func (c *config) flags(fs *flag.FlagSet, getenv func(string) string) {
	def := func(env, d string) string {
		if v := getenv(env); v != "" {
			return v
		}
		return d
	}
	fs.StringVar(&c.Addr, "addr", def("STOCKADE_ADDR", "127.0.0.1:8080"), "listen address (STOCKADE_ADDR)")
	fs.StringVar(&c.PublicURL, "public-url", getenv("STOCKADE_PUBLIC_URL"), "URL people reach the server at (STOCKADE_PUBLIC_URL; default http://ADDR)")
	fs.StringVar(&c.DataDir, "data-dir", def("STOCKADE_DATA_DIR", "./var"), "data directory (STOCKADE_DATA_DIR)")
	fs.StringVar(&c.DB, "db", getenv("STOCKADE_DB"), "database: empty for SQLite in the data dir, or a postgres:// DSN (STOCKADE_DB)")
	fs.StringVar(&c.OIDCIssuer, "oidc-issuer", getenv("STOCKADE_OIDC_ISSUER"), "OIDC issuer URL; empty runs the development identity provider (STOCKADE_OIDC_ISSUER)")
	fs.StringVar(&c.OIDCClientID, "oidc-client-id", getenv("STOCKADE_OIDC_CLIENT_ID"), "OIDC client id (STOCKADE_OIDC_CLIENT_ID)")
	c.OIDCSecret = getenv("STOCKADE_OIDC_CLIENT_SECRET") // never a flag: it would show in ps
	fs.StringVar(&c.AdminEmails, "admin-emails", getenv("STOCKADE_ADMIN_EMAILS"), "comma-separated platform operator emails (STOCKADE_ADMIN_EMAILS)")
	fs.StringVar(&c.LibvirtURIs, "libvirt-uris", def("STOCKADE_LIBVIRT_URIS", "qemu:///system"), "comma-separated libvirt URIs (STOCKADE_LIBVIRT_URIS)")
	fs.StringVar(&c.DomainType, "domain-type", getenv("STOCKADE_DOMAIN_TYPE"), `force the VM domain type "kvm" or "qemu" (STOCKADE_DOMAIN_TYPE; default: detected with a real boot)`)
	fs.StringVar(&c.EgressAllowCIDRs, "egress-allow-cidrs", getenv("STOCKADE_EGRESS_ALLOW_CIDRS"), `comma list of private ranges sandboxes may reach through the egress gateway (STOCKADE_EGRESS_ALLOW_CIDRS; default none: private, loopback, link-local, CGNAT and metadata addresses are blocked)`)
	fs.BoolVar(&c.RecordInput, "record-input", getenv("STOCKADE_RECORD_INPUT") == "true" || getenv("STOCKADE_RECORD_INPUT") == "1",
		"record terminal keystrokes as well as output (STOCKADE_RECORD_INPUT)")
	retention, _ := strconv.Atoi(def("STOCKADE_RECORDING_RETENTION_DAYS", "90"))
	fs.IntVar(&c.RetentionDays, "recording-retention-days", retention, "days terminal recordings are kept (STOCKADE_RECORDING_RETENTION_DAYS)")
	compInterval, _ := time.ParseDuration(def("STOCKADE_COMPLIANCE_INTERVAL", "5m"))
	fs.DurationVar(&c.ComplianceInterval, "compliance-interval", compInterval, "how often each tenant's compliance checklist is re-evaluated (STOCKADE_COMPLIANCE_INTERVAL)")
	probeInterval, _ := time.ParseDuration(def("STOCKADE_PROBE_INTERVAL", "24h"))
	fs.DurationVar(&c.ProbeInterval, "probe-interval", probeInterval, "how often the compliance probe runs in a sandbox of each tenant; 0: on demand only (STOCKADE_PROBE_INTERVAL)")
	metricsTenants, _ := strconv.Atoi(def("STOCKADE_METRICS_TENANTS", "200"))
	fs.IntVar(&c.MetricsTenants, "metrics-tenants", metricsTenants, `tenants with a label of their own in the per-tenant /metrics, costliest first; the rest are summed under tenant="_other" (STOCKADE_METRICS_TENANTS)`)
	fs.StringVar(&c.MetricsTokenFile, "metrics-token-file", getenv("STOCKADE_METRICS_TOKEN_FILE"), "file holding the bearer token Prometheus sends to /metrics (STOCKADE_METRICS_TOKEN_FILE; default: /metrics answers this machine only)")
	fs.StringVar(&c.GitHubAPI, "github-api", def("STOCKADE_GITHUB_API", "https://api.github.com"), "GitHub REST API base that workflow results are posted to (STOCKADE_GITHUB_API)")
	fs.StringVar(&c.GitHubURL, "github-url", def("STOCKADE_GITHUB_URL", "https://github.com"), "where workflow runs clone repositories from, as URL/owner/name.git (STOCKADE_GITHUB_URL)")
	maxFile, err := strconv.ParseInt(def("STOCKADE_MAX_FILE_BYTES", "67108864"), 10, 64)
	if err != nil {
		maxFile = -1 // check names the variable
	}
	fs.Int64Var(&c.MaxFileBytes, "max-file-bytes", maxFile, "largest file read or written through the files API, in bytes; a tenant policy's filesystem.max_file_bytes may lower it (STOCKADE_MAX_FILE_BYTES)")
	fs.StringVar(&c.SecretKey, "secret-key", getenv("STOCKADE_SECRET_KEY"), "key file for encrypting secrets at rest (STOCKADE_SECRET_KEY; default DATA_DIR/secret.key, created)")
}

func (c *config) check() error {
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Addr
	}
	u, err := url.Parse(c.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("STOCKADE_PUBLIC_URL %q: must be an http(s) URL", c.PublicURL)
	}
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	for name, v := range map[string]string{"STOCKADE_GITHUB_API": c.GitHubAPI, "STOCKADE_GITHUB_URL": c.GitHubURL} {
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s %q: must be an http(s) URL", name, v)
		}
	}
	if c.ComplianceInterval <= 0 {
		return errors.New("STOCKADE_COMPLIANCE_INTERVAL: must be a positive duration such as 5m")
	}
	if c.MetricsTenants <= 0 {
		return errors.New("STOCKADE_METRICS_TENANTS: must be a positive number such as 200")
	}
	if c.MaxFileBytes < 1 || c.MaxFileBytes > maxFileBytesBound {
		return fmt.Errorf("STOCKADE_MAX_FILE_BYTES: must be a number of bytes from 1 to %d (256 MiB, the guest agent's bound), such as 67108864 (64 MiB)", maxFileBytesBound)
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = -1 // on demand only
	}
	if c.DomainType != "" && c.DomainType != "kvm" && c.DomainType != "qemu" {
		return fmt.Errorf("STOCKADE_DOMAIN_TYPE %q: must be kvm, qemu or empty (detect)", c.DomainType)
	}
	if c.OIDCIssuer != "" && c.OIDCClientID == "" {
		return errors.New("STOCKADE_OIDC_ISSUER is set but STOCKADE_OIDC_CLIENT_ID is empty")
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
