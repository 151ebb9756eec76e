package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/tenants/clip"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/notify"
)

// Sender sends one signed webhook, retrying as it sees fit
// (*notify.Sender).
type Sender interface {
	Webhook(ctx context.Context, tenantID string, ep notify.Endpoint, event string, data any) (notify.Result, error)
}

// DispatcherConfig tunes a Dispatcher. Zero values take the defaults noted.
type DispatcherConfig struct {
	// Interval is how often the outbox is polled (1 s).
	Interval time.Duration
	// Lease is how long a claimed delivery belongs to this dispatcher
	// before another may take it over (20 min): longer than the sender's
	// whole retry schedule, so a live dispatcher is never overtaken.
	Lease time.Duration
	// Concurrency bounds the deliveries in flight (4): one slow endpoint
	// retrying for minutes must not hold up the others.
	Concurrency int
	// Retention is how long delivered and failed deliveries, and the
	// events behind them, are kept (30 days); pruned hourly.
	Retention time.Duration
	Logger    *slog.Logger
}

func (c *DispatcherConfig) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 20 * time.Minute
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Retention <= 0 {
		c.Retention = 30 * 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Dispatcher fans outbox events out to the endpoints that want them and
// delivers them. Several replicas may run one each on a shared database:
// fan-out is idempotent and deliveries are leased.
type Dispatcher struct {
	store  *Store
	sender Sender
	cfg    DispatcherConfig
	log    *slog.Logger
	slots  chan struct{}
	wg     sync.WaitGroup
}

// NewDispatcher returns a Dispatcher taking events from store and sending
// them with sender.
func NewDispatcher(store *Store, sender Sender, cfg DispatcherConfig) *Dispatcher {
	cfg.setDefaults()
	return &Dispatcher{store: store, sender: sender, cfg: cfg, log: cfg.Logger.With("component", "integrations"),
		slots: make(chan struct{}, cfg.Concurrency)}
}

// Run dispatches until ctx ends, then waits for the deliveries in flight
// (each stops at its next attempt and stays pending for the next start).
func (d *Dispatcher) Run(ctx context.Context) {
	defer d.wg.Wait()
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	var pruned time.Time
	for {
		if err := d.pass(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("dispatch webhooks", "err", err)
		}
		if now := d.store.now(); now.Sub(pruned) >= time.Hour {
			pruned = now
			if evs, dls, err := d.store.Prune(ctx, now.Add(-d.cfg.Retention)); err != nil && ctx.Err() == nil {
				d.log.Warn("prune webhook deliveries", "err", err)
			} else if evs+dls > 0 {
				d.log.Info("pruned webhook deliveries", "events", evs, "deliveries", dls)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pass fans out new events and starts as many pending deliveries as there
// are free slots.
func (d *Dispatcher) pass(ctx context.Context) error {
	if err := d.fanOut(ctx); err != nil {
		return err
	}
	free := cap(d.slots) - len(d.slots)
	if free == 0 {
		return nil
	}
	claimed, err := d.claim(ctx, free)
	if err != nil {
		return err
	}
	for _, dl := range claimed {
		d.slots <- struct{}{}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer func() { <-d.slots }()
			d.deliver(ctx, dl)
		}()
	}
	return nil
}

const fanOutBatch = 100

// fanOut makes the delivery rows of events not yet fanned out: one per
// enabled endpoint of the tenant that wants the event's type.
func (d *Dispatcher) fanOut(ctx context.Context) error {
	db := d.store.db.WithContext(ctx)
	var evs []Event
	if err := db.Where("fanned_out_at IS NULL").Order("id").Limit(fanOutBatch).Find(&evs).Error; err != nil {
		return fmt.Errorf("read outbox: %w", err)
	}
	for _, ev := range evs {
		err := db.Transaction(func(tx *gorm.DB) error {
			var eps []Endpoint
			if err := tx.Where("tenant_id = ? AND enabled = ?", ev.TenantID, true).Order("id").Find(&eps).Error; err != nil {
				return err
			}
			now := d.store.now()
			for _, ep := range eps {
				if !ep.Wants(ev.Type) {
					continue
				}
				dl := Delivery{ID: newID(), TenantID: ev.TenantID, EndpointID: ep.ID, EventID: ev.ID, EventType: ev.Type,
					State: DeliveryPending, CreatedAt: now, UpdatedAt: now}
				// Another replica may have fanned it out meanwhile.
				if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&dl).Error; err != nil {
					return err
				}
			}
			return tx.Model(&Event{}).Where("id = ? AND fanned_out_at IS NULL", ev.ID).Update("fanned_out_at", now).Error
		})
		if err != nil {
			return fmt.Errorf("fan out event %s: %w", ev.ID, err)
		}
	}
	return nil
}

// claim leases up to n pending deliveries no one holds, oldest first.
func (d *Dispatcher) claim(ctx context.Context, n int) ([]Delivery, error) {
	db := d.store.db.WithContext(ctx)
	now := d.store.now()
	var cands []Delivery
	err := db.Where("state = ? AND (lease_until IS NULL OR lease_until < ?)", DeliveryPending, now).
		Order("created_at, id").Limit(n).Find(&cands).Error
	if err != nil {
		return nil, fmt.Errorf("read pending deliveries: %w", err)
	}
	until := now.Add(d.cfg.Lease)
	var out []Delivery
	for _, c := range cands {
		res := db.Model(&Delivery{}).Where("id = ? AND state = ? AND (lease_until IS NULL OR lease_until < ?)", c.ID, DeliveryPending, now).
			Updates(map[string]any{"lease_until": until, "updated_at": now})
		if res.Error != nil {
			return out, fmt.Errorf("claim delivery %s: %w", c.ID, res.Error)
		}
		if res.RowsAffected == 1 {
			c.LeaseUntil = &until
			out = append(out, c)
		}
	}
	return out, nil
}

// deliver sends one claimed delivery and records how it ended.
func (d *Dispatcher) deliver(ctx context.Context, dl Delivery) {
	ep, err := d.store.Endpoint(ctx, dl.TenantID, dl.EndpointID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		d.finish(ctx, dl, DeliveryFailed, notify.Result{}, errors.New("the endpoint was deleted"))
		return
	case err != nil:
		d.release(ctx, dl, err)
		return
	case !ep.Enabled && dl.EventType != EventTest:
		d.finish(ctx, dl, DeliveryFailed, notify.Result{}, errors.New("the endpoint is disabled"))
		return
	}
	var ev Event
	if err := d.store.db.WithContext(ctx).Take(&ev, "id = ?", dl.EventID).Error; err != nil {
		d.release(ctx, dl, err)
		return
	}
	res, err := d.sender.Webhook(ctx, dl.TenantID, notify.Endpoint{URL: ep.URL, SecretName: ep.SecretName}, ev.Type, json.RawMessage(ev.Payload))
	if err != nil && ctx.Err() != nil {
		// Shutting down: pending again for whoever runs next.
		dl.Attempts += res.Attempts
		d.release(context.WithoutCancel(ctx), dl, err)
		return
	}
	state := DeliveryDelivered
	if err != nil {
		state = DeliveryFailed
		d.log.Warn("webhook delivery failed", "tenant", dl.TenantID, "endpoint", ep.ID, "event", ev.ID, "type", ev.Type, "err", err)
	}
	d.finish(ctx, dl, state, res, err)
}

func (d *Dispatcher) finish(ctx context.Context, dl Delivery, state string, res notify.Result, cause error) {
	set := map[string]any{"state": state, "attempts": dl.Attempts + res.Attempts, "status_code": res.StatusCode,
		"message_id": res.MessageID, "lease_until": nil, "updated_at": d.store.now(), "error": ""}
	if cause != nil {
		set["error"] = truncate(cause.Error(), 500)
	}
	if err := d.store.db.WithContext(context.WithoutCancel(ctx)).Model(&Delivery{}).Where("id = ?", dl.ID).Updates(set).Error; err != nil {
		d.log.Error("record webhook delivery", "delivery", dl.ID, "err", err)
	}
}

// release gives a delivery back for a later pass.
func (d *Dispatcher) release(ctx context.Context, dl Delivery, cause error) {
	set := map[string]any{"attempts": dl.Attempts, "lease_until": nil, "updated_at": d.store.now(), "error": truncate(cause.Error(), 500)}
	if err := d.store.db.WithContext(context.WithoutCancel(ctx)).Model(&Delivery{}).Where("id = ? AND state = ?", dl.ID, DeliveryPending).
		Updates(set).Error; err != nil {
		d.log.Error("release webhook delivery", "delivery", dl.ID, "err", err)
	}
}

// truncate bounds s for a column or a message (clip.String).
func truncate(s string, n int) string { return clip.String(s, n) }
