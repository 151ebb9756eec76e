package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/netguard"
)

// Config tunes a Store.
type Config struct {
	// AllowPrivate accepts http:// URLs and loopback or private hosts: for
	// tests only, matching notify.Config.AllowPrivate. Otherwise a tenant
	// could aim the control plane at internal services.
	AllowPrivate bool
	Clock        func() time.Time
}

// Store keeps endpoints, the outbox and the deliveries. Every method takes
// the tenant: another tenant's endpoint is errdefs.ErrNotFound.
type Store struct {
	db  *gorm.DB
	cfg Config
}

// NewStore returns a Store on db (opened and migrated).
func NewStore(db *gorm.DB, cfg Config) *Store {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Store{db: db, cfg: cfg}
}

func (s *Store) now() time.Time { return s.cfg.Clock().UTC().Truncate(time.Microsecond) }

func newID() string {
	id, _ := uuid.NewV7()
	return id.String()
}

// NewEndpoint is an endpoint to create.
type NewEndpoint struct {
	URL         string   `json:"url"`
	SecretName  string   `json:"secret_name"`
	EventTypes  []string `json:"event_types"`
	Description string   `json:"description"`
}

// secretName is the tenant secret name rule (tenants/secrets).
var secretName = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,63}$`)

// maxEnabled bounds a tenant's enabled endpoints: every event is sent to
// each of them.
const maxEnabled = 20

// checkRoom refuses one more enabled endpoint over the bound, inside tx.
func checkRoom(tx *gorm.DB, tenantID string) error {
	var n int64
	if err := tx.Model(&Endpoint{}).Where("tenant_id = ? AND enabled = ?", tenantID, true).Count(&n).Error; err != nil {
		return err
	}
	if n >= maxEnabled {
		return fmt.Errorf("%w: a tenant has at most %d enabled webhook endpoints", errdefs.ErrConflict, maxEnabled)
	}
	return nil
}

// Check validates ne as Create would, without creating: every field at
// fault (a form adds its own findings to these).
func (s *Store) Check(ne NewEndpoint) error {
	_, err := s.check(ne)
	return err
}

// check validates ne and returns it normalised; an error lists every
// field at fault.
func (s *Store) check(ne NewEndpoint) (NewEndpoint, error) {
	ne.URL = strings.TrimSpace(ne.URL)
	ne.SecretName = strings.TrimSpace(ne.SecretName)
	ne.Description = strings.TrimSpace(ne.Description)
	var errs []error
	if ne.URL == "" {
		errs = append(errs, errdefs.Required("url"))
	} else if err := s.CheckURL(ne.URL); err != nil {
		errs = append(errs, err)
	}
	if ne.SecretName == "" {
		errs = append(errs, errdefs.Required("secret_name"))
	} else if !secretName.MatchString(ne.SecretName) {
		errs = append(errs, errdefs.Invalid("secret_name", "secret_name", "must name a tenant secret (A-Z, 0-9, _) holding a whsec_ key"))
	}
	if len(ne.Description) > 200 {
		errs = append(errs, errdefs.Invalid("description", "length", "must be at most 200 characters"))
	}
	types := []string{}
	for _, t := range ne.EventTypes {
		t = strings.TrimSpace(t)
		if t == "" || slices.Contains(types, t) {
			continue
		}
		if !slices.Contains(EventTypes(), t) {
			errs = append(errs, errdefs.Invalid("event_types", "event_type", fmt.Sprintf("unknown event type %q (known: %s)", t, strings.Join(EventTypes(), ", "))))
			break
		}
		types = append(types, t)
	}
	if err := errors.Join(errs...); err != nil {
		return ne, err
	}
	slices.Sort(types)
	ne.EventTypes = types
	return ne, nil
}

// CheckURL refuses what an endpoint may not be: anything but https (http
// only under the test allowance), credentials in the URL, and loopback,
// private, link-local or zoned hosts (the tenants/netguard blocklist).
// Names are checked again on the address actually dialled, by the sender.
func (s *Store) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" || u.User != nil || (u.Scheme != "https" && u.Scheme != "http") || len(raw) > 2000 {
		return errdefs.Invalid("url", "url", "must be an https URL with a host and no credentials")
	}
	if s.cfg.AllowPrivate {
		return nil
	}
	if u.Scheme != "https" {
		return errdefs.Invalid("url", "https", "must use https: the payload and its signature would travel in clear")
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if err := netguard.CheckHost(host, nil); err != nil {
		var b *netguard.Blocked
		if errors.As(err, &b) {
			return errdefs.Invalid("url", "public", fmt.Sprintf("must be a public address, not a %s (%s)", b.Why, strings.TrimPrefix(b.Error(), b.Why+" ")))
		}
		return errdefs.Invalid("url", "public", "must be a public address")
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if host == "localhost" || !strings.Contains(host, ".") {
		return errdefs.Invalid("url", "public", "must be a public host name")
	}
	for _, suffix := range []string{".localhost", ".local", ".internal", ".home.arpa"} {
		if strings.HasSuffix(host, suffix) {
			return errdefs.Invalid("url", "public", "must be a public host name")
		}
	}
	return nil
}

func (s *Store) audit(tx *gorm.DB, e audit.Event) error {
	e.Time = s.now()
	return audit.Write(tx, e)
}

// Create adds an enabled endpoint to the tenant, audited
// integration.webhook_created in the same transaction.
func (s *Store) Create(ctx context.Context, actor audit.Actor, tenantID string, ne NewEndpoint) (Endpoint, error) {
	ne, err := s.check(ne)
	if err != nil {
		return Endpoint{}, err
	}
	types, _ := json.Marshal(ne.EventTypes)
	now := s.now()
	ep := Endpoint{ID: newID(), TenantID: tenantID, URL: ne.URL, SecretName: ne.SecretName, EventTypesJSON: string(types),
		Description: ne.Description, Enabled: true, CreatedBy: actorName(actor), CreatedAt: now, UpdatedAt: now}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := checkRoom(tx, tenantID); err != nil {
			return err
		}
		if err := tx.Create(&ep).Error; err != nil {
			return err
		}
		return s.audit(tx, actor.Event(tenantID, audit.TypeWebhookCreated, "webhook_endpoint", ep.ID, map[string]any{
			"url": ep.URL, "secret_name": ep.SecretName, "event_types": ne.EventTypes}))
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("create webhook endpoint in tenant %s: %w", tenantID, err)
	}
	return ep, nil
}

func actorName(a audit.Actor) string {
	if a.Name != "" {
		return a.Name
	}
	return a.ID
}

// Endpoints lists the tenant's endpoints, oldest first.
func (s *Store) Endpoints(ctx context.Context, tenantID string) ([]Endpoint, error) {
	var out []Endpoint
	if err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("created_at, id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list webhook endpoints of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// Endpoint returns the tenant's endpoint with that id.
func (s *Store) Endpoint(ctx context.Context, tenantID, id string) (Endpoint, error) {
	var ep Endpoint
	if err := s.db.WithContext(ctx).Take(&ep, "tenant_id = ? AND id = ?", tenantID, id).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			err = errdefs.ErrNotFound
		}
		return Endpoint{}, fmt.Errorf("webhook endpoint %s: %w", id, err)
	}
	return ep, nil
}

// SetEnabled enables or disables the tenant's endpoint, audited
// integration.webhook_updated. A disabled endpoint gets no new events;
// deliveries already pending for it end failed.
func (s *Store) SetEnabled(ctx context.Context, actor audit.Actor, tenantID, id string, enabled bool) (Endpoint, error) {
	var ep Endpoint
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if enabled {
			if err := tx.Take(&ep, "tenant_id = ? AND id = ?", tenantID, id).Error; err != nil {
				if errors.Is(err, gorm.ErrRecordNotFound) {
					return errdefs.ErrNotFound
				}
				return err
			}
			if !ep.Enabled {
				if err := checkRoom(tx, tenantID); err != nil {
					return err
				}
			}
		}
		res := tx.Model(&Endpoint{}).Where("tenant_id = ? AND id = ?", tenantID, id).
			Updates(map[string]any{"enabled": enabled, "updated_at": s.now()})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return errdefs.ErrNotFound
		}
		if err := tx.Take(&ep, "id = ?", id).Error; err != nil {
			return err
		}
		return s.audit(tx, actor.Event(tenantID, audit.TypeWebhookUpdated, "webhook_endpoint", id, map[string]any{
			"url": ep.URL, "enabled": enabled}))
	})
	if err != nil {
		return Endpoint{}, fmt.Errorf("set webhook endpoint %s enabled=%t: %w", id, enabled, err)
	}
	return ep, nil
}

// Delete removes the tenant's endpoint, audited
// integration.webhook_deleted. Its deliveries stay in the log.
func (s *Store) Delete(ctx context.Context, actor audit.Actor, tenantID, id string) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ep Endpoint
		if err := tx.Take(&ep, "tenant_id = ? AND id = ?", tenantID, id).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return errdefs.ErrNotFound
			}
			return err
		}
		if err := tx.Delete(&Endpoint{}, "id = ?", id).Error; err != nil {
			return err
		}
		return s.audit(tx, actor.Event(tenantID, audit.TypeWebhookDeleted, "webhook_endpoint", id, map[string]any{
			"url": ep.URL, "secret_name": ep.SecretName}))
	})
	if err != nil {
		return fmt.Errorf("delete webhook endpoint %s: %w", id, err)
	}
	return nil
}

// Deliveries returns the tenant's most recent deliveries, newest first
// (of one endpoint when endpointID is set).
func (s *Store) Deliveries(ctx context.Context, tenantID, endpointID string, limit int) ([]Delivery, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	q := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID)
	if endpointID != "" {
		q = q.Where("endpoint_id = ?", endpointID)
	}
	var out []Delivery
	if err := q.Order("created_at DESC, id DESC").Limit(limit).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list webhook deliveries of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// Delivery returns one of the tenant's deliveries.
func (s *Store) Delivery(ctx context.Context, tenantID, id string) (Delivery, error) {
	var d Delivery
	if err := s.db.WithContext(ctx).Take(&d, "tenant_id = ? AND id = ?", tenantID, id).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			err = errdefs.ErrNotFound
		}
		return Delivery{}, fmt.Errorf("webhook delivery %s: %w", id, err)
	}
	return d, nil
}

// Add writes an event of the tenant to the outbox inside tx, the
// transaction of the change it reports: the event exists exactly when the
// change does. data must encode as a JSON object; the event id is added to
// it as event_id, so receivers can drop a redelivery.
func (s *Store) Add(tx *gorm.DB, tenantID, eventType string, data any) error {
	ev, err := s.event(tenantID, eventType, data)
	if err != nil {
		return err
	}
	if err := tx.Create(&ev).Error; err != nil {
		return fmt.Errorf("add %s event to the outbox: %w", eventType, err)
	}
	return nil
}

func (s *Store) event(tenantID, eventType string, data any) (Event, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("encode %s event: %w", eventType, err)
	}
	obj := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return Event{}, fmt.Errorf("encode %s event: data must be a JSON object: %w", eventType, err)
	}
	id := "evt_" + strings.ReplaceAll(newID(), "-", "")
	obj["event_id"], _ = json.Marshal(id)
	payload, err := json.Marshal(obj)
	if err != nil {
		return Event{}, fmt.Errorf("encode %s event: %w", eventType, err)
	}
	return Event{ID: id, TenantID: tenantID, Type: eventType, Payload: string(payload), CreatedAt: s.now()}, nil
}

// SendTest queues a webhook.test event for one endpoint of the tenant
// (enabled or not: a test is how an admin checks one before enabling it),
// audited integration.webhook_tested. The dispatcher sends it.
func (s *Store) SendTest(ctx context.Context, actor audit.Actor, tenantID, endpointID string) (Delivery, error) {
	var d Delivery
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ep Endpoint
		if err := tx.Take(&ep, "tenant_id = ? AND id = ?", tenantID, endpointID).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return errdefs.ErrNotFound
			}
			return err
		}
		ev, err := s.event(tenantID, EventTest, map[string]any{"endpoint_id": ep.ID, "requested_by": actorName(actor)})
		if err != nil {
			return err
		}
		now := s.now()
		ev.FannedOutAt = &now
		if err := tx.Create(&ev).Error; err != nil {
			return err
		}
		d = Delivery{ID: newID(), TenantID: tenantID, EndpointID: ep.ID, EventID: ev.ID, EventType: EventTest, State: DeliveryPending,
			CreatedAt: now, UpdatedAt: now}
		if err := tx.Create(&d).Error; err != nil {
			return err
		}
		return s.audit(tx, actor.Event(tenantID, audit.TypeWebhookTested, "webhook_endpoint", ep.ID, map[string]any{
			"url": ep.URL, "event_id": ev.ID}))
	})
	if err != nil {
		return Delivery{}, fmt.Errorf("send test event to webhook endpoint %s: %w", endpointID, err)
	}
	return d, nil
}

// Prune deletes what is done and older than before: deliveries delivered
// or failed, then outbox events fanned out that no delivery refers to any
// more. Pending deliveries and their events stay whatever their age.
func (s *Store) Prune(ctx context.Context, before time.Time) (events, deliveries int64, err error) {
	cutoff := before.UTC().Truncate(time.Microsecond)
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Where("state <> ? AND updated_at < ?", DeliveryPending, cutoff).Delete(&Delivery{})
		if res.Error != nil {
			return res.Error
		}
		deliveries = res.RowsAffected
		res = tx.Where("fanned_out_at IS NOT NULL AND fanned_out_at < ? AND id NOT IN (?)", cutoff,
			tx.Model(&Delivery{}).Select("event_id")).Delete(&Event{})
		if res.Error != nil {
			return res.Error
		}
		events = res.RowsAffected
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("prune integrations: %w", err)
	}
	return events, deliveries, nil
}
