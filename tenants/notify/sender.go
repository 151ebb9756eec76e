// Package notify sends a tenant's outgoing notifications: Standard Webhooks
// (signed, retried with backoff), Slack and Jira Cloud. Every attempt is
// written to a delivery log. Integration secrets are tenant secrets, looked
// up by name when a message is sent, scoped to the host they go to, and
// never logged: the log and the audit name secrets, never values.
package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/tenants/clip"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/netguard"
)

// Secrets gives the value of a tenant's secret for sending to host; a
// secret not scoped to host is an error (errdefs.ErrNotFound), so a value
// only ever goes where its owner allowed.
type Secrets interface {
	Value(ctx context.Context, tenantID, name, host string) (string, error)
}

// Config tunes a Sender. Zero values take the defaults noted.
type Config struct {
	// Backoff is the wait before each retry; its length bounds the retries
	// (default 1s, 5s, 30s, 2m, 10m: six attempts).
	Backoff []time.Duration
	// AttemptTimeout bounds one request (10 s).
	AttemptTimeout time.Duration
	// AllowPrivate lets requests reach loopback, private and link-local
	// addresses: for tests only. Otherwise a tenant could aim the control
	// plane at internal services (metadata endpoints, the database).
	AllowPrivate bool
	// SlackAPI is the Slack Web API base for bot tokens
	// (https://slack.com/api).
	SlackAPI string
	// SlackWebhookHost is the host incoming webhook URLs must point to
	// (SlackWebhookHost).
	SlackWebhookHost string
	// GitHubAPI is the GitHub REST API base (https://api.github.com).
	GitHubAPI string
	// Timers is the sender's clock: it times the waits between attempts
	// (Backoff) and stamps signatures and the delivery log; default the
	// real one.
	Timers clockwork.Clock
	// Clock, when set, stamps signatures and the delivery log instead of
	// Timers.Now.
	//
	// Deprecated: a shim for callers that hand every package a
	// func() time.Time (the composition root); set Timers.
	Clock  func() time.Time
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Backoff == nil {
		c.Backoff = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 10 * time.Second
	}
	if c.SlackAPI == "" {
		c.SlackAPI = "https://slack.com/api"
	}
	if c.GitHubAPI == "" {
		c.GitHubAPI = "https://api.github.com"
	}
	if c.SlackWebhookHost == "" {
		c.SlackWebhookHost = SlackWebhookHost
	}
	if c.Timers == nil {
		c.Timers = clockwork.NewRealClock()
	}
	if c.Clock == nil {
		c.Clock = c.Timers.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Sender sends notifications and logs every attempt.
type Sender struct {
	db      *gorm.DB
	secrets Secrets
	client  *http.Client
	cfg     Config
}

// New returns a Sender logging to db, taking secret values from secrets.
func New(db *gorm.DB, secrets Secrets, cfg Config) *Sender {
	cfg.setDefaults()
	d := &net.Dialer{Timeout: cfg.AttemptTimeout}
	if !cfg.AllowPrivate {
		// Checked on the address actually dialled, after DNS, against the
		// blocklist the egress gateway uses: a name that resolves to a
		// private address, or a zoned literal, is refused too.
		d = netguard.Dialer(cfg.AttemptTimeout, nil)
	}
	tr := &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: cfg.AttemptTimeout, ResponseHeaderTimeout: cfg.AttemptTimeout,
		MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second, Proxy: nil}
	client := &http.Client{Transport: tr, Timeout: cfg.AttemptTimeout,
		// A redirect could take a signed request or a token elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Sender{db: db, secrets: secrets, client: client, cfg: cfg}
}

// Delivery is one attempt to send a message, as logged.
type Delivery struct {
	ID        string `gorm:"column:id;primaryKey" json:"id"`
	TenantID  string `gorm:"column:tenant_id" json:"-"`
	MessageID string `gorm:"column:message_id" json:"message_id"`
	Kind      string `gorm:"column:kind" json:"kind"`
	Event     string `gorm:"column:event" json:"event"`
	// Target is where it went, without anything secret: the URL without
	// its query, or only the host when the URL itself is a secret.
	Target     string    `gorm:"column:target" json:"target"`
	Attempt    int       `gorm:"column:attempt" json:"attempt"`
	StatusCode int       `gorm:"column:status_code" json:"status_code"`
	Error      string    `gorm:"column:error" json:"error,omitempty"`
	DurationMS int64     `gorm:"column:duration_ms" json:"duration_ms"`
	CreatedAt  time.Time `gorm:"column:created_at;autoCreateTime:false" json:"created_at"`
}

// TableName is the GORM table of Delivery.
func (Delivery) TableName() string { return "notify_deliveries" }

// Kinds of message.
const (
	KindWebhook = "webhook"
	KindSlack   = "slack"
	KindJira    = "jira"
	KindGitHub  = "github"
)

// Deliveries returns the tenant's delivery log, newest first, at most
// limit rows (of one message when messageID is set).
func (s *Sender) Deliveries(ctx context.Context, tenantID, messageID string, limit int) ([]Delivery, error) {
	if limit <= 0 || limit > 500 {
		limit = 500
	}
	q := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID)
	if messageID != "" {
		q = q.Where("message_id = ?", messageID)
	}
	var out []Delivery
	if err := q.Order("created_at DESC, attempt DESC").Limit(limit).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list deliveries of tenant %s: %w", tenantID, err)
	}
	for i := range out {
		out[i].CreatedAt = out[i].CreatedAt.UTC()
	}
	return out, nil
}

// request is one message to send, rebuilt for each attempt.
type request struct {
	tenantID  string
	messageID string
	kind      string
	event     string
	target    string // logged
	method    string
	url       string
	header    http.Header
	body      []byte
	// sign, when set, adds headers per attempt (a fresh timestamp).
	sign func(h http.Header, body []byte) error
	// ok decides success from a 2xx answer's body (Slack's {"ok":false}).
	ok func(body []byte) error
}

// Result is how a message ended.
type Result struct {
	MessageID  string
	Attempts   int
	StatusCode int
	// Body is the final answer's body (bounded), for callers that need
	// what the far end made (Jira's issue key).
	Body []byte
}

// ErrGaveUp: every attempt failed; the delivery log has each.
var ErrGaveUp = errors.New("delivery failed")

// send makes attempts until one succeeds, the answer says retrying is
// pointless (a 4xx), attempts run out, or ctx ends.
func (s *Sender) send(ctx context.Context, q request) (Result, error) {
	res := Result{MessageID: q.messageID}
	var last error
	for attempt := 1; ; attempt++ {
		res.Attempts = attempt
		code, body, err := s.attempt(ctx, q)
		res.StatusCode, res.Body = code, body
		s.log(ctx, q, attempt, code, err)
		if err == nil {
			return res, nil
		}
		last = err
		var perm *permanentError
		if errors.As(err, &perm) || attempt > len(s.cfg.Backoff) {
			break
		}
		if err := s.wait(ctx, s.cfg.Backoff[attempt-1]); err != nil {
			last = err
			break
		}
	}
	return res, fmt.Errorf("%s %s to %s: %w after %d attempts: %w", q.kind, q.event, q.target, ErrGaveUp, res.Attempts, last)
}

// wait waits d on the sender's clock, or until ctx ends.
func (s *Sender) wait(ctx context.Context, d time.Duration) error {
	t := s.cfg.Timers.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// permanentError is a failure that retrying will not fix.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

const maxAnswer = 64 << 10

func (s *Sender) attempt(ctx context.Context, q request) (int, []byte, error) {
	actx, cancel := context.WithTimeout(ctx, s.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, q.method, q.url, bytes.NewReader(q.body))
	if err != nil {
		return 0, nil, &permanentError{err: fmt.Errorf("build request: %w", redact(err))}
	}
	for k, v := range q.header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "Stockade-Notify/1")
	if q.sign != nil {
		if err := q.sign(req.Header, q.body); err != nil {
			return 0, nil, &permanentError{err: err}
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(err, netguard.ErrBlocked) {
			return 0, nil, &permanentError{err: redact(err)}
		}
		return 0, nil, redact(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if q.ok != nil {
			if err := q.ok(body); err != nil {
				return resp.StatusCode, body, &permanentError{err: err}
			}
		}
		return resp.StatusCode, body, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout:
		return resp.StatusCode, body, fmt.Errorf("answered %d", resp.StatusCode)
	}
	return resp.StatusCode, body, &permanentError{err: fmt.Errorf("answered %d: %s", resp.StatusCode, truncate(string(body), 200))}
}

// redact drops the URL from a client error: it may hold a secret (a Slack
// incoming webhook's path is its credential).
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

func (s *Sender) log(ctx context.Context, q request, attempt, code int, err error) {
	id, _ := uuid.NewV7()
	d := Delivery{ID: id.String(), TenantID: q.tenantID, MessageID: q.messageID, Kind: q.kind, Event: q.event, Target: q.target,
		Attempt: attempt, StatusCode: code, CreatedAt: s.cfg.Clock().UTC().Truncate(time.Microsecond)}
	if err != nil {
		d.Error = truncate(err.Error(), 500)
	}
	if err := s.db.WithContext(context.WithoutCancel(ctx)).Create(&d).Error; err != nil {
		s.cfg.Logger.Warn("log delivery", "tenant", q.tenantID, "message", q.messageID, "err", err)
	}
}

// checkURL parses a destination: http(s) with a host; plain http only when
// private addresses are allowed (tests), since secrets and signatures would
// travel in clear.
func (s *Sender) checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil {
		return nil, errdefs.Invalid("url", "url", "must be an https URL with a host")
	}
	if u.Scheme == "http" && !s.cfg.AllowPrivate {
		return nil, errdefs.Invalid("url", "https", "must use https")
	}
	return u, nil
}

// logTarget is u without query and fragment.
func logTarget(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

func newMessageID() string {
	id, _ := uuid.NewV7()
	return "msg_" + strings.ReplaceAll(id.String(), "-", "")
}

// truncate bounds s for a column or a message (clip.String).
func truncate(s string, n int) string { return clip.String(s, n) }
