package integrations_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/clocktest"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/integrations"
	"github.com/stockade-dev/stockade/tenants/notify"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// verify checks a request per the Standard Webhooks specification
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md),
// written from the spec and not from our signer: the secret is base64 after
// "whsec_"; the signed content is "id.timestamp.body"; webhook-signature is
// a space-separated list of "v1,<base64 HMAC-SHA256>", any of which may
// match; timestamps more than 5 minutes off are refused.
func verify(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	id, tsText, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || tsText == "" || sigs == "" {
		return errors.New("missing required headers")
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return errors.New("invalid timestamp")
	}
	if d := now.Unix() - ts; d > 300 || d < -300 {
		return errors.New("timestamp outside tolerance")
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.%s", id, ts, body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && subtle.ConstantTimeCompare(got, want) == 1 {
			return nil
		}
	}
	return errors.New("no matching signature")
}

type hit struct {
	header http.Header
	body   []byte
	code   int
}

// receiver answers with codes in turn (the last repeats) and records what
// came.
type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	hits  []hit
	codes []int
}

func newReceiver(t *testing.T, codes ...int) *receiver {
	r := &receiver{codes: codes}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		code := r.codes[min(len(r.hits), len(r.codes)-1)]
		r.hits = append(r.hits, hit{req.Header.Clone(), b, code})
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

func whsec(t *testing.T) string {
	k := make([]byte, 24)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(k)
}

// waitDelivery polls until the delivery is no longer pending.
func waitDelivery(t *testing.T, s *integrations.Store, tenantID, id string) integrations.Delivery {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := s.Delivery(context.Background(), tenantID, id)
		if err != nil {
			t.Fatalf("delivery %s: %v", id, err)
		}
		if d.State != integrations.DeliveryPending {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s still pending after 20 s: %+v", id, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDispatchRetriesAndSigns: an endpoint answering 500 twice then 200
// gets the event three times, each attempt verifying with a Standard
// Webhooks verifier, with the same webhook-id, after backing off; the
// delivery ends delivered with its attempts in the log. Only the endpoints
// that want the event type, and are enabled, get it.
func TestDispatchRetriesAndSigns(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tn := newTenant(t, d.DB, "dispatch")
			root := make([]byte, 32)
			rand.Read(root)
			ss, err := secrets.New(d.DB, root, secrets.Config{})
			if err != nil {
				t.Fatal(err)
			}
			secret := whsec(t)
			if _, err := ss.Create(ctx, admin, tn.ID, secrets.NewSecret{Name: "HOOK_KEY", Value: secret, Hosts: []string{"127.0.0.1"}}); err != nil {
				t.Fatal(err)
			}
			// The sender's clock moves on by itself while it waits between
			// attempts: the backoff costs no real time, and the delivery
			// log's times show it.
			sender := notify.New(d.DB, notify.HostScoped(ss), notify.Config{AllowPrivate: true,
				Backoff: []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second}, AttemptTimeout: 2 * time.Second,
				Timers: clocktest.Auto(t, time.Now(), time.Second)})
			store := integrations.NewStore(d.DB, integrations.Config{AllowPrivate: true})
			flaky, other, off := newReceiver(t, 500, 500, 200), newReceiver(t, 200), newReceiver(t, 200)
			ep, err := store.Create(ctx, admin, tn.ID, integrations.NewEndpoint{URL: flaky.URL + "/hook", SecretName: "HOOK_KEY",
				EventTypes: []string{integrations.EventSandboxDestroyed}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Create(ctx, admin, tn.ID, integrations.NewEndpoint{URL: other.URL, SecretName: "HOOK_KEY",
				EventTypes: []string{integrations.EventRunCompleted}}); err != nil {
				t.Fatal(err)
			}
			disabled, err := store.Create(ctx, admin, tn.ID, integrations.NewEndpoint{URL: off.URL, SecretName: "HOOK_KEY"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.SetEnabled(ctx, admin, tn.ID, disabled.ID, false); err != nil {
				t.Fatal(err)
			}
			usage := map[string]any{"vcpu_seconds": 1.5, "gib_seconds": 0.25}
			if err := store.Add(d.DB, tn.ID, integrations.EventSandboxDestroyed, map[string]any{"sandbox_id": "sb1", "reason": "requested", "usage": usage}); err != nil {
				t.Fatal(err)
			}
			disp := integrations.NewDispatcher(store, sender, integrations.DispatcherConfig{Interval: 20 * time.Millisecond})
			done := make(chan struct{})
			go func() { disp.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()

			var dl integrations.Delivery
			deadline := time.Now().Add(20 * time.Second)
			for {
				list, err := store.Deliveries(ctx, tn.ID, "", 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(list) > 0 {
					if len(list) != 1 || list[0].EndpointID != ep.ID {
						t.Fatalf("Got(deliveries) = %+v; want one, to %s only", list, ep.ID)
					}
					dl = waitDelivery(t, store, tn.ID, list[0].ID)
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no delivery after 20 s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if dl.State != integrations.DeliveryDelivered || dl.Attempts != 3 || dl.StatusCode != 200 || dl.MessageID == "" {
				t.Errorf("Got(delivery) = %+v; want delivered after 3 attempts with 200", dl)
			}
			hits := flaky.got()
			if len(hits) != 3 {
				t.Fatalf("Got(requests to the endpoint) = %d; want 3", len(hits))
			}
			for i, h := range hits {
				if err := verify(secret, h.header, h.body, time.Now()); err != nil {
					t.Errorf("Got(verify attempt %d) = %v; want nil", i+1, err)
				}
				if h.header.Get("webhook-id") != dl.MessageID {
					t.Errorf("Got(webhook-id of attempt %d) = %q; want %q", i+1, h.header.Get("webhook-id"), dl.MessageID)
				}
				// Tampered: the verifier must refuse it, or it proves nothing.
				if err := verify(secret, h.header, append([]byte(" "), h.body...), time.Now()); err == nil {
					t.Errorf("Got(verify tampered body) = nil; want an error")
				}
			}
			var env struct {
				Type string `json:"type"`
				Data struct {
					EventID   string             `json:"event_id"`
					SandboxID string             `json:"sandbox_id"`
					Reason    string             `json:"reason"`
					Usage     map[string]float64 `json:"usage"`
				} `json:"data"`
			}
			if err := json.Unmarshal(hits[2].body, &env); err != nil {
				t.Fatalf("decode body %s: %v", hits[2].body, err)
			}
			if env.Type != integrations.EventSandboxDestroyed || env.Data.SandboxID != "sb1" || env.Data.Reason != "requested" ||
				env.Data.Usage["vcpu_seconds"] != 1.5 || env.Data.EventID != dl.EventID {
				t.Errorf("Got(body) = %s; want the sandbox.destroyed event %s", hits[2].body, dl.EventID)
			}
			log, err := sender.Deliveries(ctx, tn.ID, dl.MessageID, 0)
			if err != nil || len(log) != 3 {
				t.Fatalf("Got(sender log) = %v, %v; want 3 attempts", log, err)
			}
			at := map[int]time.Time{}
			for _, l := range log {
				at[l.Attempt] = l.CreatedAt
			}
			if w1, w2 := at[2].Sub(at[1]), at[3].Sub(at[2]); w1 != 10*time.Second || w2 != 20*time.Second {
				t.Errorf("Got(backoff, from the log's times) = %s, %s; want 10s, 20s", w1, w2)
			}
			if n := len(other.got()) + len(off.got()); n != 0 {
				t.Errorf("Got(requests to endpoints not wanting it) = %d; want 0", n)
			}
			log, err = sender.Deliveries(ctx, tn.ID, dl.MessageID, 10)
			if err != nil {
				t.Fatal(err)
			}
			var codes []int
			for i := len(log) - 1; i >= 0; i-- {
				codes = append(codes, log[i].StatusCode)
			}
			if fmt.Sprint(codes) != "[500 500 200]" {
				t.Errorf("Got(delivery log codes) = %v; want [500 500 200]", codes)
			}

			// A test event goes to one endpoint, even a disabled one.
			td, err := store.SendTest(ctx, admin, tn.ID, disabled.ID)
			if err != nil {
				t.Fatal(err)
			}
			td = waitDelivery(t, store, tn.ID, td.ID)
			if td.State != integrations.DeliveryDelivered || len(off.got()) != 1 {
				t.Errorf("Got(test delivery) = %+v, %d requests; want delivered once", td, len(off.got()))
			} else if err := verify(secret, off.got()[0].header, off.got()[0].body, time.Now()); err != nil {
				t.Errorf("Got(verify test event) = %v; want nil", err)
			}
		})
	}
}

// TestDispatchMissingSecret: a missing secret fails the delivery with the reason
// and sends nothing.
func TestDispatchMissingSecret(t *testing.T) {
	d := dbtest.SQLite(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tn := newTenant(t, d, "nosecret")
	root := make([]byte, 32)
	rand.Read(root)
	ss, err := secrets.New(d, root, secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sender := notify.New(d, notify.HostScoped(ss), notify.Config{AllowPrivate: true, Backoff: []time.Duration{}})
	store := integrations.NewStore(d, integrations.Config{AllowPrivate: true})
	rcv := newReceiver(t, 200)
	ep, err := store.Create(ctx, admin, tn.ID, integrations.NewEndpoint{URL: rcv.URL, SecretName: "ABSENT"})
	if err != nil {
		t.Fatal(err)
	}
	dl, err := store.SendTest(ctx, admin, tn.ID, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	disp := integrations.NewDispatcher(store, sender, integrations.DispatcherConfig{Interval: 20 * time.Millisecond})
	done := make(chan struct{})
	go func() { disp.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	dl = waitDelivery(t, store, tn.ID, dl.ID)
	if dl.State != integrations.DeliveryFailed || !strings.Contains(dl.Error, "ABSENT") || len(rcv.got()) != 0 {
		t.Errorf("Got(delivery) = %+v, %d requests; want failed naming the secret, nothing sent", dl, len(rcv.got()))
	}
}
