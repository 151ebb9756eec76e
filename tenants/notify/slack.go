package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// SlackWebhookHost is the host Slack's incoming webhooks live on: a
// webhook URL secret must be scoped to it, and its URL must point there.
const SlackWebhookHost = "hooks.slack.com"

// SlackMessage is a Slack message: text (notifications, fallbacks) and
// Block Kit blocks.
type SlackMessage struct {
	Channel string           `json:"channel,omitempty"`
	Text    string           `json:"text"`
	Blocks  []map[string]any `json:"blocks,omitempty"`
}

// Slack posts m for the tenant: to the incoming webhook whose URL is the
// secret WebhookURLSecret (scoped to the webhook host), or with the bot
// token BotTokenSecret (scoped to the Slack API host) to Channel through
// chat.postMessage.
func (s *Sender) Slack(ctx context.Context, tenantID string, sl workflow.Slack, event string, m SlackMessage) (Result, error) {
	q := request{tenantID: tenantID, messageID: newMessageID(), kind: KindSlack, event: event, method: http.MethodPost,
		header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}}
	switch {
	case sl.WebhookURLSecret != "":
		host := s.cfg.SlackWebhookHost
		raw, err := s.secrets.Value(ctx, tenantID, sl.WebhookURLSecret, host)
		if err != nil {
			return Result{}, fmt.Errorf("slack: secret %s: %w", sl.WebhookURLSecret, err)
		}
		u, err := s.checkURL(raw)
		if err != nil || u.Hostname() != host {
			// Say nothing of the value: it is the credential.
			return Result{}, fmt.Errorf("slack: secret %s: %w", sl.WebhookURLSecret,
				errdefs.Invalid("webhook_url_secret", "slack_url", "the secret must hold an https://"+host+"/... incoming webhook URL"))
		}
		m.Channel = ""
		q.url, q.target = u.String(), u.Scheme+"://"+u.Host+"/…"
	case sl.BotTokenSecret != "":
		api, err := url.Parse(s.cfg.SlackAPI + "/chat.postMessage")
		if err != nil {
			return Result{}, fmt.Errorf("slack api: %w", err)
		}
		token, err := s.secrets.Value(ctx, tenantID, sl.BotTokenSecret, api.Hostname())
		if err != nil {
			return Result{}, fmt.Errorf("slack: secret %s: %w", sl.BotTokenSecret, err)
		}
		m.Channel = sl.Channel
		q.url, q.target = api.String(), logTarget(api)
		q.header.Set("Authorization", "Bearer "+token)
		// chat.postMessage answers 200 with ok false on errors.
		q.ok = func(body []byte) error {
			var a struct {
				OK    bool   `json:"ok"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal(body, &a); err != nil {
				return fmt.Errorf("slack answered: %w", err)
			}
			if !a.OK {
				return fmt.Errorf("slack answered: %s", a.Error)
			}
			return nil
		}
	default:
		return Result{}, errdefs.Invalid("slack", "required", "name webhook_url_secret, or bot_token_secret with channel")
	}
	body, err := json.Marshal(m)
	if err != nil {
		return Result{}, fmt.Errorf("encode slack message: %w", err)
	}
	q.body = body
	return s.send(ctx, q)
}

// errNotScoped: the secret exists but may not go to that host.
var errNotScoped = errors.New("not scoped to the host")
