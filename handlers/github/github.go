// Package github receives GitHub's webhook deliveries (the "hooks" of
// /hooks/github/:tenant: inbound only; what Stockade sends out is a
// webhook of tenants/integrations and tenants/notify) and starts the
// workflow runs they trigger. Each delivery is verified against the
// tenant's secret over the raw body before anything else is read from it.
// A bad or missing signature, a tenant without a GitHub secret and a slug
// no tenant has get the same 401, after the same work, and start nothing:
// the receiver is public, and must not tell who is a tenant.
package github

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/stockade-dev/stockade/sandbox/runs"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/workflow"
)

// SecretHost is the host a tenant's GitHub webhook secret must be scoped to:
// it is shared with GitHub and nobody else.
const SecretHost = "github.com"

// Tenants finds a tenant by its slug (*tenants.Store).
type Tenants interface {
	TenantBySlug(ctx context.Context, slug string) (tenants.Tenant, error)
}

// Workflows gives a tenant's settings and live workflows (*workflow.Store).
type Workflows interface {
	Settings(ctx context.Context, tenantID string) (workflow.Settings, error)
	List(ctx context.Context, tenantID string) ([]workflow.Version, error)
}

// Secrets gives a tenant secret's value for a host (notify.HostScoped).
type Secrets interface {
	Value(ctx context.Context, tenantID, name, host string) (string, error)
}

// Runs records deliveries with their runs (*runs.Store).
type Runs interface {
	Deliver(ctx context.Context, actor audit.Actor, tenantID string, d runs.Delivery, nrs []runs.NewRun) ([]runs.Run, error)
}

// Starter starts recorded runs (*runs.Engine); nil leaves them queued.
type Starter interface {
	Start(r runs.Run) error
}

// MaxBody bounds a delivery. GitHub caps payloads at 25 MB, but the events
// workflows use are far smaller; a larger one is refused with 413.
const MaxBody = 1 << 20

// Receiver handles POST /hooks/github/:tenant.
type Receiver struct {
	Tenants   Tenants
	Workflows Workflows
	Secrets   Secrets
	Runs      Runs
	Starter   Starter
	Log       *slog.Logger
	// MaxBody overrides MaxBody when set.
	MaxBody int64
}

// Answer is the JSON body of every answer.
type Answer struct {
	// Status is pong, accepted, skipped, ignored or duplicate, or for a
	// refusal the name of its problem type (errdefs.Problem.Name with "_"
	// for "-"): unauthorized, too_large, malformed, internal.
	Status string   `json:"status"`
	Detail string   `json:"detail,omitempty"`
	Runs   []string `json:"runs,omitempty"`
	// Skipped are the runs recorded without running: their trigger was
	// not trusted to run the workflow (each run says why).
	Skipped []string `json:"skipped,omitempty"`
}

func reply(w http.ResponseWriter, code int, a Answer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(a)
}

// refuse answers err with the status and problem the one error mapper gives
// it; an internal error's words stay in the log.
func refuse(w http.ResponseWriter, err error) {
	p := errdefs.ToProblem(err)
	a := Answer{Status: strings.ReplaceAll(p.Name(), "-", "_"), Detail: p.Detail}
	if p.Status >= http.StatusInternalServerError {
		a.Detail = ""
	}
	reply(w, p.Status, a)
}

// errBadSignature is every unauthenticated delivery's refusal, whatever
// the reason (the log says which): a bad or missing signature, no GitHub
// secret, no such tenant.
var errBadSignature = errdefs.WithDetail(errdefs.ErrUnauthorized, "bad or missing X-Hub-Signature-256")

// Handler serves "POST /hooks/github/{tenant}" on its own (tests, or a mux).
func (g *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/github/{tenant}", func(w http.ResponseWriter, r *http.Request) {
		g.Serve(w, r, r.PathValue("tenant"))
	})
	return mux
}

// Serve handles one delivery for the tenant with slug.
func (g *Receiver) Serve(w http.ResponseWriter, r *http.Request, slug string) {
	ctx := r.Context()
	log := g.Log
	if log == nil {
		log = slog.Default()
	}
	// The body first, bounded, for every slug: a size refusal must not
	// depend on whether the tenant exists.
	limit := g.MaxBody
	if limit <= 0 {
		limit = MaxBody
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		refuse(w, &errdefs.TooLargeError{Op: "read delivery", Size: -1, Max: limit})
		return
	}
	if err != nil {
		refuse(w, &errdefs.MalformedError{Field: "body", Detail: "could not read the body"})
		return
	}
	t, err := g.Tenants.TenantBySlug(ctx, slug)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		log.ErrorContext(ctx, "github hook: tenant", "slug", slug, "err", err)
		refuse(w, err)
		return
	}
	// An unknown slug goes on as a tenant with no secret (t.ID is ""): the
	// same settings read and the same HMAC (over a key nobody has) as a
	// real tenant, so neither the answer nor its timing tells them apart.
	secret, why, err := g.secret(ctx, t.ID)
	if err != nil {
		log.ErrorContext(ctx, "github hook: settings", "tenant", t.ID, "err", err)
		refuse(w, err)
		return
	}
	verified := Verify(secret, r.Header.Get("X-Hub-Signature-256"), body)
	if why == "" && !verified {
		why = "bad or missing signature"
	}
	if why != "" {
		log.WarnContext(ctx, "github hook: refused", "slug", slug, "tenant", t.ID, "why", why,
			"delivery", r.Header.Get("X-GitHub-Delivery"), "remote", r.RemoteAddr)
		refuse(w, errBadSignature)
		return
	}
	// Verified: from here on the body is GitHub's.
	event, delivery := r.Header.Get("X-GitHub-Event"), r.Header.Get("X-GitHub-Delivery")
	if event == "ping" {
		reply(w, http.StatusOK, Answer{Status: "pong"})
		return
	}
	if delivery == "" || len(delivery) > 100 || event == "" || len(event) > 64 {
		refuse(w, &errdefs.MalformedError{Field: "X-GitHub-Delivery", Detail: "X-GitHub-Event and X-GitHub-Delivery are required"})
		return
	}
	ev, trig, err := Parse(event, body)
	if err != nil {
		refuse(w, &errdefs.MalformedError{Field: "body", Detail: err.Error()})
		return
	}
	var nrs []runs.NewRun
	if ev.Name != "" {
		wfs, err := g.Workflows.List(ctx, t.ID)
		if err != nil {
			log.ErrorContext(ctx, "github hook: workflows", "tenant", t.ID, "err", err)
			refuse(w, err)
			return
		}
		for _, v := range wfs {
			if v.Def.Matches(ev) {
				t := trig
				tr := v.Def.Trust(ev)
				t.Trust, t.TrustReason = tr.Level, tr.Reason
				nrs = append(nrs, runs.NewRun{Version: v, Trigger: t})
			}
		}
	}
	digest := sha256.Sum256(body)
	actor := audit.Actor{Kind: audit.ActorSystem, ID: "github", Name: "GitHub (" + trig.Sender + ")", RemoteAddr: r.RemoteAddr,
		RequestID: w.Header().Get("X-Request-Id")}
	created, err := g.Runs.Deliver(ctx, actor, t.ID, runs.Delivery{DeliveryID: delivery, Event: event, Action: ev.Action,
		Repository: ev.Repository, BodySHA256: hex.EncodeToString(digest[:])}, nrs)
	if errors.Is(err, runs.ErrDuplicateDelivery) {
		// A redelivery, or a captured body replayed under a new id: the
		// signature is GitHub's either way, the event happened once.
		reply(w, http.StatusOK, Answer{Status: "duplicate",
			Detail: "this delivery (its X-GitHub-Delivery id or its body) was received before; nothing was started again"})
		return
	}
	if err != nil {
		log.ErrorContext(ctx, "github hook: record delivery", "tenant", t.ID, "delivery", delivery, "err", err)
		refuse(w, err)
		return
	}
	ids := make([]string, 0, len(created))
	var skipped []string
	for _, run := range created {
		if run.State == runs.StateSkipped {
			skipped = append(skipped, run.ID)
			continue
		}
		ids = append(ids, run.ID)
		if g.Starter != nil {
			if err := g.Starter.Start(run); err != nil {
				// It stays queued: the engine's recovery picks it up.
				log.WarnContext(ctx, "github hook: start run", "run", run.ID, "err", err)
			}
		}
	}
	switch {
	case len(ids) > 0:
		reply(w, http.StatusAccepted, Answer{Status: "accepted", Runs: ids, Skipped: skipped})
	case len(skipped) > 0:
		reply(w, http.StatusOK, Answer{Status: "skipped", Skipped: skipped,
			Detail: "the workflows this event matches do not run it: " + created[0].TrustReason})
	default:
		reply(w, http.StatusOK, Answer{Status: "ignored", Detail: "no workflow matches this event"})
	}
}

// secret is the key deliveries to the tenant are signed with, or, with the
// reason deliveries cannot be verified, a random key of the same size that
// no signature matches. Every tenant, and an unknown one (tenantID ""),
// takes the same steps: read the settings, look the secret up (by a name
// no secret has when none is set), so that the time taken says little
// about which it was.
func (g *Receiver) secret(ctx context.Context, tenantID string) (key []byte, why string, err error) {
	settings, err := g.Workflows.Settings(ctx, tenantID)
	if err != nil {
		return nil, "", err
	}
	name := settings.GitHubSecretName
	if name == "" {
		name = unsetSecret
	}
	v, verr := g.Secrets.Value(ctx, tenantID, name, SecretHost)
	switch {
	case tenantID == "":
		why = "no such tenant"
	case settings.GitHubSecretName == "":
		why = "GitHub deliveries are not configured for this tenant"
	case verr != nil:
		why = "the secret " + name + " is unavailable: " + verr.Error()
	default:
		return []byte(v), "", nil
	}
	key = make([]byte, sha256.Size)
	if _, err := rand.Read(key); err != nil {
		return nil, "", fmt.Errorf("github hook: dummy key: %w", err)
	}
	return key, why, nil
}

// unsetSecret is looked up when a tenant names no secret: secret names are
// upper case, so no secret has it.
const unsetSecret = "github-secret-unset"

// Verify reports whether header ("sha256=<hex>") is the HMAC-SHA256 of body
// under secret, compared in constant time.
func Verify(secret []byte, header string, body []byte) bool {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}

// Sign is the X-Hub-Signature-256 value GitHub sends for body.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// payload holds the fields of push, pull_request and issue_comment
// deliveries that workflows use.
type payload struct {
	Action     string `json:"action"`
	Ref        string `json:"ref"`
	After      string `json:"after"`
	Deleted    bool   `json:"deleted"`
	Number     int    `json:"number"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Sender struct {
		Login string `json:"login"`
	} `json:"sender"`
	PullRequest *struct {
		Title string `json:"title"`
		Head  struct {
			Ref  string        `json:"ref"`
			SHA  string        `json:"sha"`
			Repo *prRepository `json:"repo"`
		} `json:"head"`
		Base struct {
			Ref  string        `json:"ref"`
			Repo *prRepository `json:"repo"`
		} `json:"base"`
	} `json:"pull_request"`
	Label *struct {
		Name string `json:"name"`
	} `json:"label"`
	Issue *struct {
		Number      int             `json:"number"`
		PullRequest json.RawMessage `json:"pull_request"`
	} `json:"issue"`
	Comment *struct {
		Body string `json:"body"`
		User struct {
			Login string `json:"login"`
		} `json:"user"`
		AuthorAssociation string `json:"author_association"`
	} `json:"comment"`
}

// prRepository is the head or base repository of a pull request; GitHub
// sends null for a head repository that was deleted.
type prRepository struct {
	ID       int64  `json:"id"`
	FullName string `json:"full_name"`
	Fork     bool   `json:"fork"`
}

// fromFork reports whether the pull request's code comes from outside the
// repository it targets: its head repository is gone, is another
// repository, or is a fork (even of itself: a repository that is a fork
// counts as one, erring on the side of no secrets).
func fromFork(head, base *prRepository, repo string) bool {
	if head == nil {
		return true
	}
	if head.Fork {
		return true
	}
	target := repo
	if base != nil && base.FullName != "" {
		target = base.FullName
	}
	if !strings.EqualFold(head.FullName, target) || !strings.EqualFold(head.FullName, repo) {
		return true
	}
	return base != nil && head.ID != 0 && base.ID != 0 && head.ID != base.ID
}

// Parse reduces a verified delivery to the event workflows match on and the
// trigger summary its runs keep. Events workflows do not use give an Event
// with no Name.
func Parse(event string, body []byte) (workflow.Event, runs.Trigger, error) {
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		return workflow.Event{}, runs.Trigger{}, fmt.Errorf("the %s payload is not JSON: %w", event, err)
	}
	repo := p.Repository.FullName
	trig := runs.Trigger{Kind: event, Repository: repo, Sender: p.Sender.Login}
	ev := workflow.Event{Action: p.Action, Repository: repo}
	switch event {
	case workflow.EventPush:
		if p.Deleted {
			return workflow.Event{}, trig, nil // a deleted branch has nothing to run
		}
		ev.Name = event
		ev.Branch, _ = strings.CutPrefix(p.Ref, "refs/heads/")
		if !strings.HasPrefix(p.Ref, "refs/heads/") {
			ev.Branch = "" // a tag
		}
		trig.Ref, trig.SHA = p.Ref, p.After
	case workflow.EventPullRequest:
		if p.PullRequest == nil {
			return workflow.Event{}, trig, errors.New("a pull_request payload without pull_request")
		}
		ev.Name, ev.Branch = event, p.PullRequest.Base.Ref
		if p.Label != nil {
			ev.Label = p.Label.Name
		}
		trig.Ref, trig.SHA, trig.PRNumber = p.PullRequest.Head.Ref, p.PullRequest.Head.SHA, p.Number
		head := p.PullRequest.Head.Repo
		if ev.Fork = fromFork(head, p.PullRequest.Base.Repo, repo); ev.Fork && head != nil {
			ev.HeadRepository = head.FullName
		}
	case workflow.EventIssueComment:
		if p.Issue == nil || p.Comment == nil {
			return workflow.Event{}, trig, errors.New("an issue_comment payload without issue or comment")
		}
		ev.Name, ev.Comment = event, p.Comment.Body
		ev.Author, ev.Association = p.Comment.User.Login, p.Comment.AuthorAssociation
		ev.OnPullRequest = len(p.Issue.PullRequest) > 0 && string(p.Issue.PullRequest) != "null"
		if ev.OnPullRequest {
			// The comment names no commit: the pull request's head ref
			// is what to fetch.
			trig.PRNumber, trig.Ref = p.Issue.Number, fmt.Sprintf("refs/pull/%d/head", p.Issue.Number)
		}
	}
	return ev, trig, nil
}
