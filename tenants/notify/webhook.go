package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// SecretPrefix starts a Standard Webhooks signing secret.
const SecretPrefix = "whsec_"

// Key decodes a Standard Webhooks secret ("whsec_" + base64 key; the
// prefix is optional, as in the reference libraries).
func Key(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil || len(key) < 16 {
		return nil, errdefs.Invalid("secret", "whsec", "a webhook secret is whsec_ followed by at least 16 bytes in base64")
	}
	return key, nil
}

// Sign returns the webhook-signature value of a message: "v1," and the
// base64 HMAC-SHA256, under key, of "id.timestamp.body" (timestamp in Unix
// seconds), per https://www.standardwebhooks.com.
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Endpoint is an outgoing webhook: where, and the name of the tenant secret
// holding its signing secret.
type Endpoint struct {
	URL        string
	SecretName string
}

// Envelope is the body of every webhook: the event type, when it happened,
// and its data.
type Envelope struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
}

// Webhook sends event with data to the tenant's endpoint, signed with the
// secret the endpoint names (which must be scoped to its host), retried
// with backoff on 5xx, 429 and network errors. Each attempt carries the
// same webhook-id and a fresh webhook-timestamp and signature.
func (s *Sender) Webhook(ctx context.Context, tenantID string, ep Endpoint, event string, data any) (Result, error) {
	u, err := s.checkURL(ep.URL)
	if err != nil {
		return Result{}, err
	}
	now := s.cfg.Clock().UTC()
	body, err := json.Marshal(Envelope{Type: event, Timestamp: now, Data: data})
	if err != nil {
		return Result{}, fmt.Errorf("encode webhook %s: %w", event, err)
	}
	secret, err := s.secrets.Value(ctx, tenantID, ep.SecretName, u.Hostname())
	if err != nil {
		return Result{}, fmt.Errorf("webhook %s to %s: secret %s: %w", event, u.Host, ep.SecretName, err)
	}
	key, err := Key(secret)
	if err != nil {
		return Result{}, fmt.Errorf("webhook %s to %s: secret %s: %w", event, u.Host, ep.SecretName, err)
	}
	id := newMessageID()
	return s.send(ctx, request{
		tenantID: tenantID, messageID: id, kind: KindWebhook, event: event, target: logTarget(u),
		method: http.MethodPost, url: u.String(), header: http.Header{"Content-Type": {"application/json"}}, body: body,
		sign: func(h http.Header, body []byte) error {
			ts := s.cfg.Clock()
			h.Set("webhook-id", id)
			h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
			h.Set("webhook-signature", Sign(key, id, ts, body))
			return nil
		},
	})
}
