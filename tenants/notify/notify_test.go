package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/clocktest"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada Admin"}

type env struct {
	name    string
	db      *gorm.DB
	secrets *secrets.Store
	tenant  tenants.Tenant
	sender  *notify.Sender
}

// newEnv makes a tenant with the given secrets (name -> value), all scoped
// to 127.0.0.1, and a Sender allowed to reach loopback, with a backoff of
// 1, 2, 3 s on a fake clock that moves on by itself while the sender waits
// (the delivery log's times show the waits).
func newEnv(t *testing.T, d dbtest.DB, vals map[string]string, tweak func(*notify.Config)) env {
	t.Helper()
	ctx := context.Background()
	ts := tenants.NewStore(d.DB, nil)
	tn, err := ts.CreateTenant(ctx, admin, "notify-"+d.Name, "Notify")
	if err != nil {
		t.Fatal(err)
	}
	root := make([]byte, 32)
	rand.Read(root)
	ss, err := secrets.New(d.DB, root, secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range vals {
		if _, err := ss.Create(ctx, admin, tn.ID, secrets.NewSecret{Name: name, Value: v, Hosts: []string{"127.0.0.1"}}); err != nil {
			t.Fatalf("create secret %s: %v", name, err)
		}
	}
	cfg := notify.Config{
		Backoff: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, AttemptTimeout: 500 * time.Millisecond,
		AllowPrivate: true, SlackWebhookHost: "127.0.0.1", Timers: clocktest.Auto(t, time.Now(), time.Second),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	return env{name: d.Name, db: d.DB, secrets: ss, tenant: tn, sender: notify.New(d.DB, notify.HostScoped(ss), cfg)}
}

// server is an httptest server on 127.0.0.1 answering with the next status
// of codes (the last one repeats), recording each request.
type server struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []recorded
	codes []int
	body  string
	delay time.Duration
}

type recorded struct {
	method, path string
	header       http.Header
	body         []byte
}

func newServer(t *testing.T, body string, codes ...int) *server {
	s := &server{codes: codes, body: body}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, recorded{r.Method, r.URL.Path, r.Header.Clone(), b})
		code := s.codes[min(len(s.reqs), len(s.codes))-1]
		delay := s.delay
		if len(s.reqs) > 1 {
			delay = 0 // only the first answer is late
		}
		s.mu.Unlock()
		time.Sleep(delay)
		w.WriteHeader(code)
		io.WriteString(w, s.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

// verifyStandardWebhook checks a request per the Standard Webhooks
// specification, independently of the package's signer: the signed content
// is "id.timestamp.body", the key is the base64 after "whsec_", the header
// holds space-separated "v1,<base64 HMAC-SHA256>" signatures, and the
// timestamp must be within five minutes.
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("timestamp is not an integer")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("timestamp outside tolerance")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no matching v1 signature")
}

const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestWebhookRetriesAndVerifies(t *testing.T) {
	ctx := context.Background()
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			e := newEnv(t, d, map[string]string{"HOOK_SECRET": whsec}, nil)
			srv := newServer(t, "", 503, 500, 204)
			res, err := e.sender.Webhook(ctx, e.tenant.ID, notify.Endpoint{URL: srv.URL + "/hook?token=q", SecretName: "HOOK_SECRET"},
				"run.ended", map[string]any{"run_id": "r1", "state": "failed"})
			if err != nil || res.Attempts != 3 || res.StatusCode != 204 {
				t.Fatalf("Webhook() = %+v, %v; want 3 attempts ending 204", res, err)
			}
			reqs := srv.requests()
			if len(reqs) != 3 {
				t.Fatalf("server got %d requests; want 3", len(reqs))
			}
			for i, r := range reqs {
				if err := verifyStandardWebhook(whsec, r.header, r.body, time.Now()); err != nil {
					t.Errorf("request %d: verify = %v; want nil", i, err)
				}
				if r.method != http.MethodPost || r.path != "/hook" || r.header.Get("Content-Type") != "application/json" {
					t.Errorf("request %d = %s %s %s; want POST /hook application/json", i, r.method, r.path, r.header.Get("Content-Type"))
				}
				if got := r.header.Get("webhook-id"); got != res.MessageID {
					t.Errorf("request %d webhook-id = %q; want the message id %q on every attempt", i, got, res.MessageID)
				}
				var env notify.Envelope
				if err := json.Unmarshal(r.body, &env); err != nil || env.Type != "run.ended" {
					t.Errorf("request %d body = %s; want a run.ended envelope", i, r.body)
				}
			}
			// A tampered body or another secret does not verify.
			if err := verifyStandardWebhook(whsec, reqs[0].header, append(reqs[0].body, ' '), time.Now()); err == nil {
				t.Errorf("verify(tampered body) = nil; want an error")
			}
			if err := verifyStandardWebhook("whsec_"+base64.StdEncoding.EncodeToString([]byte("another key of 24 bytes!")), reqs[0].header, reqs[0].body, time.Now()); err == nil {
				t.Errorf("verify(other secret) = nil; want an error")
			}
			log, err := e.sender.Deliveries(ctx, e.tenant.ID, res.MessageID, 0)
			if err != nil || len(log) != 3 {
				t.Fatalf("Deliveries() = %v, %v; want 3 attempts", log, err)
			}
			codes := map[int]int{}
			at := map[int]time.Time{}
			for _, l := range log {
				codes[l.Attempt], at[l.Attempt] = l.StatusCode, l.CreatedAt
				if strings.Contains(l.Target, "token") || l.Kind != notify.KindWebhook {
					t.Errorf("delivery %+v: target keeps the query or kind is wrong", l)
				}
			}
			if codes[1] != 503 || codes[2] != 500 || codes[3] != 204 {
				t.Errorf("logged codes by attempt = %v; want 1:503 2:500 3:204", codes)
			}
			if w1, w2 := at[2].Sub(at[1]), at[3].Sub(at[2]); w1 != time.Second || w2 != 2*time.Second {
				t.Errorf("Got(backoff waits, from the log's times) = %s, %s; want 1s, 2s", w1, w2)
			}
			// Another tenant sees none of the log.
			if other, _ := e.sender.Deliveries(ctx, "other-tenant", "", 0); len(other) != 0 {
				t.Errorf("Deliveries(other tenant) = %v; want none", other)
			}
		})
	}
}

func TestWebhookGivesUp(t *testing.T) {
	ctx := context.Background()
	d := dbtest.DB{Name: "sqlite", DB: dbtest.SQLite(t)}
	e := newEnv(t, d, map[string]string{"HOOK_SECRET": whsec, "BAD": "not-a-whsec"}, nil)
	data := map[string]string{"x": "y"}
	tests := []struct {
		name     string
		codes    []int
		delay    time.Duration
		secret   string
		attempts int  // requests the server sees
		gaveUp   bool // ErrGaveUp (else a refusal before sending)
	}{
		{"5xx every time", []int{502}, 0, "HOOK_SECRET", 4, true},
		{"4xx is not retried", []int{400}, 0, "HOOK_SECRET", 1, true},
		{"429 is retried", []int{429, 200}, 0, "HOOK_SECRET", 2, false},
		{"timeout is retried", []int{200}, 800 * time.Millisecond, "HOOK_SECRET", 2, false},
		{"unknown secret sends nothing", []int{200}, 0, "NOPE", 0, false},
		{"secret not a whsec sends nothing", []int{200}, 0, "BAD", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, "", tt.codes...)
			srv.delay = tt.delay
			_, err := e.sender.Webhook(ctx, e.tenant.ID, notify.Endpoint{URL: srv.URL, SecretName: tt.secret}, "run.ended", data)
			if n := len(srv.requests()); n != tt.attempts {
				t.Errorf("server got %d requests; want %d", n, tt.attempts)
			}
			wantErr := tt.gaveUp || tt.attempts == 0
			if (err != nil) != wantErr || (tt.gaveUp && !errors.Is(err, notify.ErrGaveUp)) {
				t.Errorf("Webhook() = %v; want error %v (gave up %v)", err, wantErr, tt.gaveUp)
			}
			if err != nil && strings.Contains(err.Error(), whsec) {
				t.Errorf("error %q shows the secret", err)
			}
		})
	}
}

func TestPrivateAddressesRefused(t *testing.T) {
	ctx := context.Background()
	d := dbtest.DB{Name: "sqlite", DB: dbtest.SQLite(t)}
	e := newEnv(t, d, map[string]string{"HOOK_SECRET": whsec}, func(c *notify.Config) { c.AllowPrivate = false })
	// An https listener on loopback: refused by address, before any TLS.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("request reached %s", r.URL) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, u := range []string{srv.URL, "https://localhost:" + port + "/x", "http://127.0.0.1:" + port} {
		res, err := e.sender.Webhook(ctx, e.tenant.ID, notify.Endpoint{URL: u, SecretName: "HOOK_SECRET"}, "run.ended", nil)
		if err == nil || res.Attempts > 1 {
			t.Errorf("Webhook(%s) = %+v, %v; want refused after at most one attempt", u, res, err)
		}
	}
}

func TestSlack(t *testing.T) {
	ctx := context.Background()
	d := dbtest.DB{Name: "sqlite", DB: dbtest.SQLite(t)}
	hook := newServer(t, "ok", 200)
	api := newServer(t, `{"ok":true}`, 200)
	bad := newServer(t, `{"ok":false,"error":"channel_not_found"}`, 200)
	webhookURL := hook.URL + "/services/T000/B000/XXXXSECRETPATH"
	e := newEnv(t, d, map[string]string{"SLACK_WEBHOOK": webhookURL, "SLACK_BOT": "xoxb-123-secret"},
		func(c *notify.Config) { c.SlackAPI = api.URL + "/api" })
	code := 1
	run := notify.RunResult{TenantID: e.tenant.ID, RunID: "r1", Workflow: "tests", Number: 3, State: "failed", Reason: `step "test": exit code 1`,
		Repository: "acme/app", PRNumber: 7, URL: "https://stockade.test/runs/r1", DurationMS: 83000,
		Steps: []notify.Step{{Name: "test <unit>", State: "failed", ExitCode: &code}}}

	if err := e.sender.RunEnded(ctx, workflow.Notify{Slack: &workflow.Slack{WebhookURLSecret: "SLACK_WEBHOOK"}}, run); err != nil {
		t.Fatalf("RunEnded(slack webhook) = %v", err)
	}
	reqs := hook.requests()
	if len(reqs) != 1 || reqs[0].method != http.MethodPost || reqs[0].path != "/services/T000/B000/XXXXSECRETPATH" ||
		!strings.HasPrefix(reqs[0].header.Get("Content-Type"), "application/json") {
		t.Fatalf("webhook requests = %+v; want one JSON POST to the secret's path", reqs)
	}
	var msg struct {
		Channel string           `json:"channel"`
		Text    string           `json:"text"`
		Blocks  []map[string]any `json:"blocks"`
	}
	if err := json.Unmarshal(reqs[0].body, &msg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg.Text, "tests #3 failed on acme/app#7") || len(msg.Blocks) != 2 || msg.Channel != "" {
		t.Errorf("slack message = %+v; want text with the summary, 2 blocks, no channel", msg)
	}
	var bb strings.Builder
	enc := json.NewEncoder(&bb)
	enc.SetEscapeHTML(false)
	enc.Encode(msg.Blocks)
	blocks := bb.String()
	if !strings.Contains(string(blocks), "<https://stockade.test/runs/r1|View run>") || !strings.Contains(string(blocks), "test &lt;unit&gt;") {
		t.Errorf("blocks = %s; want the link and escaped step names", blocks)
	}
	log, _ := e.sender.Deliveries(ctx, e.tenant.ID, "", 0)
	for _, l := range log {
		if strings.Contains(l.Target, "SECRETPATH") {
			t.Errorf("delivery log target %q shows the webhook URL's secret path", l.Target)
		}
	}

	// Bot token: chat.postMessage with a bearer token and the channel.
	bot := workflow.Notify{Slack: &workflow.Slack{BotTokenSecret: "SLACK_BOT", Channel: "#builds"}}
	if err := e.sender.RunEnded(ctx, bot, run); err != nil {
		t.Fatalf("RunEnded(slack bot) = %v", err)
	}
	reqs = api.requests()
	if len(reqs) != 1 || reqs[0].path != "/api/chat.postMessage" || reqs[0].header.Get("Authorization") != "Bearer xoxb-123-secret" {
		t.Fatalf("api requests = %+v; want POST /api/chat.postMessage with the bearer token", reqs)
	}
	if err := json.Unmarshal(reqs[0].body, &msg); err != nil || msg.Channel != "#builds" || msg.Text == "" {
		t.Errorf("bot message = %+v, %v; want channel #builds and text", msg, err)
	}
	// ok:false is an error, not retried.
	e2 := newEnv(t, dbtest.DB{Name: "sqlite2", DB: dbtest.SQLite(t)}, map[string]string{"SLACK_BOT": "xoxb-1"},
		func(c *notify.Config) { c.SlackAPI = bad.URL })
	run.TenantID = e2.tenant.ID
	if err := e2.sender.RunEnded(ctx, bot, run); err == nil || !strings.Contains(err.Error(), "channel_not_found") || len(bad.requests()) != 1 {
		t.Errorf("RunEnded(ok false) = %v after %d requests; want channel_not_found after 1", err, len(bad.requests()))
	}
	// A webhook secret pointing elsewhere than the webhook host is refused.
	e3 := newEnv(t, dbtest.DB{Name: "sqlite3", DB: dbtest.SQLite(t)}, map[string]string{"SLACK_WEBHOOK": "https://evil.test/x"}, nil)
	run.TenantID = e3.tenant.ID
	if err := e3.sender.RunEnded(ctx, workflow.Notify{Slack: &workflow.Slack{WebhookURLSecret: "SLACK_WEBHOOK"}}, run); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("RunEnded(webhook URL elsewhere) = %v; want ErrInvalid", err)
	}
}

func TestJira(t *testing.T) {
	ctx := context.Background()
	d := dbtest.DB{Name: "sqlite", DB: dbtest.SQLite(t)}
	var (
		mu   sync.Mutex
		seen []recorded
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, recorded{r.Method, r.URL.Path, r.Header.Clone(), b})
		mu.Unlock()
		switch r.URL.Path {
		case "/rest/api/3/issue/ENG-42/comment":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"10000"}`)
		case "/rest/api/3/issue":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"10001","key":"ENG-99"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	e := newEnv(t, d, map[string]string{"JIRA_TOKEN": "atl-token"}, nil)
	j := &workflow.Jira{Site: srv.URL, Email: "bot@acme.test", TokenSecret: "JIRA_TOKEN", Project: "ENG", CreateOnFailure: true}
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("bot@acme.test:atl-token"))
	tests := []struct {
		name      string
		ref       string
		title     string
		state     string
		wantPaths []string
	}{
		{"key in branch: comment", "refs/heads/feature/eng-42-login", "", "failed", []string{"/rest/api/3/issue/ENG-42/comment"}},
		{"key in title: comment", "main", "ENG-42 fix login", "succeeded", []string{"/rest/api/3/issue/ENG-42/comment"}},
		{"other project's key: create on failure", "OPS-7", "", "failed", []string{"/rest/api/3/issue"}},
		{"no key and success: nothing", "main", "", "succeeded", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			run := notify.RunResult{TenantID: e.tenant.ID, RunID: "r1", Workflow: "tests", Number: 1, State: tt.state, Ref: tt.ref, Title: tt.title,
				URL: "https://stockade.test/runs/r1"}
			if err := e.sender.RunEnded(ctx, workflow.Notify{Jira: j}, run); err != nil {
				t.Fatalf("RunEnded() = %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			var paths []string
			for _, r := range seen {
				paths = append(paths, r.path)
				if r.method != http.MethodPost || r.header.Get("Authorization") != wantAuth || r.header.Get("Content-Type") != "application/json" {
					t.Errorf("request %s %s auth %q type %q; want POST, %q, application/json", r.method, r.path, r.header.Get("Authorization"),
						r.header.Get("Content-Type"), wantAuth)
				}
				var body map[string]any
				if err := json.Unmarshal(r.body, &body); err != nil {
					t.Fatal(err)
				}
				doc, _ := body["body"].(map[string]any)
				if r.path == "/rest/api/3/issue" {
					f, _ := body["fields"].(map[string]any)
					if p, _ := f["project"].(map[string]any); p["key"] != "ENG" {
						t.Errorf("create fields = %v; want project ENG", f)
					}
					if it, _ := f["issuetype"].(map[string]any); it["name"] != notify.JiraIssueType {
						t.Errorf("create fields = %v; want issue type %s", f, notify.JiraIssueType)
					}
					if s, _ := f["summary"].(string); !strings.Contains(s, "tests #1 failed") {
						t.Errorf("summary = %q; want the run summary", s)
					}
					doc, _ = f["description"].(map[string]any)
				}
				if doc["type"] != "doc" || doc["version"] != float64(1) {
					t.Errorf("ADF = %v; want type doc, version 1", doc)
				}
				if raw, _ := json.Marshal(doc); !strings.Contains(string(raw), `"href":"https://stockade.test/runs/r1"`) {
					t.Errorf("ADF = %s; want a link to the run", raw)
				}
			}
			if strings.Join(paths, ",") != strings.Join(tt.wantPaths, ",") {
				t.Errorf("paths = %v; want %v", paths, tt.wantPaths)
			}
		})
	}
	if key, err := e.sender.JiraCreateIssue(ctx, e.tenant.ID, *j, "s", map[string]any{"type": "doc", "version": 1}); err != nil || key != "ENG-99" {
		t.Errorf("JiraCreateIssue() = %q, %v; want ENG-99", key, err)
	}
}

func TestIssueKeys(t *testing.T) {
	tests := []struct {
		texts []string
		want  []string
	}{
		{[]string{"feature/ENG-12-x", "ENG-12: and ENG-13"}, []string{"ENG-12", "ENG-13"}},
		{[]string{"eng-7"}, []string{"ENG-7"}},
		{[]string{"OPS-1", "ENGX-2", "ENG-0"}, nil},
	}
	for _, tt := range tests {
		if got := notify.IssueKeys("ENG", tt.texts...); strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("IssueKeys(ENG, %q) = %v; want %v", tt.texts, got, tt.want)
		}
	}
}

func TestRunEndedOn(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, dbtest.DB{Name: "sqlite", DB: dbtest.SQLite(t)}, map[string]string{"HOOK_SECRET": whsec}, nil)
	srv := newServer(t, "", 200)
	n := workflow.Notify{On: []string{"failure", "timed_out"}, Webhooks: []workflow.Webhook{{URL: srv.URL, Secret: "HOOK_SECRET"}}}
	for _, state := range []string{"succeeded", "failed", "cancelled", "timed_out"} {
		if err := e.sender.RunEnded(ctx, n, notify.RunResult{TenantID: e.tenant.ID, State: state}); err != nil {
			t.Errorf("RunEnded(%s) = %v", state, err)
		}
	}
	var states []string
	for _, r := range srv.requests() {
		var env struct {
			Data notify.RunResult `json:"data"`
		}
		json.Unmarshal(r.body, &env)
		states = append(states, env.Data.State)
	}
	if strings.Join(states, ",") != "failed,timed_out" {
		t.Errorf("notified states = %v; want failed, timed_out", states)
	}
}

func TestSign(t *testing.T) {
	// The example of the Standard Webhooks specification.
	key, err := notify.Key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := notify.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("Sign(spec example) = %s; want %s", got, want)
	}
	if _, err := notify.Key("whsec_c2hvcnQ="); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Key(short) = %v; want ErrInvalid", err)
	}
}

func TestGitHub(t *testing.T) {
	ctx := context.Background()
	d := dbtest.DB{Name: "sqlite", DB: dbtest.SQLite(t)}
	srv := newServer(t, `{"id":1}`, 201)
	e := newEnv(t, d, map[string]string{"GITHUB_TOKEN": "ghp_secret"}, func(c *notify.Config) { c.GitHubAPI = srv.URL })
	sha := "6dcb09b5b57875f334f61aebed695e2e4193db5e"
	code := 2
	run := notify.RunResult{TenantID: e.tenant.ID, RunID: "r1", Workflow: "tests", Number: 4, State: "failed", Repository: "acme/app", SHA: sha,
		PRNumber: 7, URL: "https://stockade.test/runs/r1", Steps: []notify.Step{{Name: "unit | fast", State: "failed", ExitCode: &code}}}
	gh := &workflow.GitHub{TokenSecret: "GITHUB_TOKEN"}
	no := false

	type status struct {
		State, TargetURL, Description, Context string
	}
	decode := func(r recorded) (status, string) {
		var st struct {
			State       string `json:"state"`
			TargetURL   string `json:"target_url"`
			Description string `json:"description"`
			Context     string `json:"context"`
			Body        string `json:"body"`
		}
		if err := json.Unmarshal(r.body, &st); err != nil {
			t.Fatalf("body %s: %v", r.body, err)
		}
		return status{st.State, st.TargetURL, st.Description, st.Context}, st.Body
	}
	tests := []struct {
		name   string
		do     func() error
		paths  []string
		states []string
	}{
		{"started: pending status", func() error { return e.sender.RunStarted(ctx, workflow.Notify{GitHub: gh}, run) },
			[]string{"/repos/acme/app/statuses/" + sha}, []string{"pending"}},
		{"ended: status and comment", func() error { return e.sender.RunEnded(ctx, workflow.Notify{GitHub: gh}, run) },
			[]string{"/repos/acme/app/statuses/" + sha, "/repos/acme/app/issues/7/comments"}, []string{"failure", ""}},
		{"on excludes failure: the status still, no comment", func() error {
			return e.sender.RunEnded(ctx, workflow.Notify{On: []string{"success"}, GitHub: gh}, run)
		}, []string{"/repos/acme/app/statuses/" + sha}, []string{"failure"}},
		{"statuses off", func() error {
			return e.sender.RunEnded(ctx, workflow.Notify{GitHub: &workflow.GitHub{TokenSecret: "GITHUB_TOKEN", Status: &no}}, run)
		}, []string{"/repos/acme/app/issues/7/comments"}, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv.mu.Lock()
			srv.reqs = nil
			srv.mu.Unlock()
			if err := tt.do(); err != nil {
				t.Fatalf("call = %v", err)
			}
			reqs := srv.requests()
			if len(reqs) != len(tt.paths) {
				t.Fatalf("requests = %d; want %d", len(reqs), len(tt.paths))
			}
			for i, r := range reqs {
				if r.method != http.MethodPost || r.path != tt.paths[i] || r.header.Get("Authorization") != "Bearer ghp_secret" ||
					r.header.Get("Accept") != "application/vnd.github+json" || r.header.Get("X-GitHub-Api-Version") == "" {
					t.Errorf("request %d = %s %s auth %q accept %q; want POST %s with the bearer token and GitHub's media type", i, r.method, r.path,
						r.header.Get("Authorization"), r.header.Get("Accept"), tt.paths[i])
				}
				st, body := decode(r)
				if tt.states[i] != "" {
					if st.State != tt.states[i] || st.Context != "stockade/tests" || st.TargetURL != run.URL || st.Description == "" || len(st.Description) > 140 {
						t.Errorf("status = %+v; want %s, context stockade/tests, the run's URL, a short description", st, tt.states[i])
					}
				} else if !strings.Contains(body, "tests #4 failed") || !strings.Contains(body, `unit \| fast`) || !strings.Contains(body, "](https://stockade.test/runs/r1)") {
					t.Errorf("comment = %q; want the summary, escaped step names and a link", body)
				}
			}
		})
	}
	// A run without a commit or pull request asks nothing of GitHub.
	srv.mu.Lock()
	srv.reqs = nil
	srv.mu.Unlock()
	if err := e.sender.RunEnded(ctx, workflow.Notify{GitHub: gh}, notify.RunResult{TenantID: e.tenant.ID, Workflow: "tests", State: "failed"}); err != nil || len(srv.requests()) != 0 {
		t.Errorf("RunEnded(manual run) = %v with %d requests; want none", err, len(srv.requests()))
	}
}
