// Package integrations keeps a tenant's outgoing webhook endpoints and
// delivers events to them. Events (sandbox.created, sandbox.destroyed,
// run.completed) are written to an outbox in the same transaction as the
// state change they report, so none is lost or invented by a crash; a
// dispatcher fans each out to the endpoints that want it and sends it,
// signed per Standard Webhooks, through the notify sender (retries with
// backoff on 5xx, every attempt in the delivery log).
package integrations

import (
	"encoding/json"
	"time"

	"gorm.io/gorm"
)

// Event types an endpoint can subscribe to.
const (
	EventSandboxCreated   = "sandbox.created"
	EventSandboxDestroyed = "sandbox.destroyed"
	EventRunCompleted     = "run.completed"
	// EventTest is sent only by "send test event", whatever an endpoint
	// subscribes to.
	EventTest = "webhook.test"
)

// EventTypes lists the types an endpoint can subscribe to.
func EventTypes() []string {
	return []string{EventSandboxCreated, EventSandboxDestroyed, EventRunCompleted}
}

// Endpoint is an outgoing webhook endpoint of a tenant.
type Endpoint struct {
	ID       string `gorm:"column:id;primaryKey" json:"id"`
	TenantID string `gorm:"column:tenant_id" json:"-"`
	URL      string `gorm:"column:url" json:"url"`
	// SecretName names the tenant secret holding the whsec_ signing key; the
	// secret must be scoped to the URL's host.
	SecretName     string    `gorm:"column:secret_name" json:"secret_name"`
	EventTypesJSON string    `gorm:"column:event_types" json:"-"`
	Description    string    `gorm:"column:description" json:"description,omitempty"`
	Enabled        bool      `gorm:"column:enabled" json:"enabled"`
	CreatedBy      string    `gorm:"column:created_by" json:"created_by,omitempty"`
	CreatedAt      time.Time `gorm:"column:created_at;autoCreateTime:false" json:"created_at"`
	UpdatedAt      time.Time `gorm:"column:updated_at;autoUpdateTime:false" json:"updated_at"`
}

// TableName is the GORM table of Endpoint.
func (Endpoint) TableName() string { return "webhook_endpoints" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (e *Endpoint) AfterFind(*gorm.DB) error {
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	return nil
}

// EventTypes are the types it receives; empty means all.
func (e Endpoint) EventTypes() []string {
	out := []string{}
	_ = json.Unmarshal([]byte(e.EventTypesJSON), &out)
	return out
}

// Wants reports whether it receives events of type t.
func (e Endpoint) Wants(t string) bool {
	types := e.EventTypes()
	if len(types) == 0 {
		return true
	}
	for _, x := range types {
		if x == t {
			return true
		}
	}
	return false
}

// MarshalJSON adds the event types as a list.
func (e Endpoint) MarshalJSON() ([]byte, error) {
	type plain Endpoint
	return json.Marshal(struct {
		plain
		EventTypes []string `json:"event_types"`
	}{plain(e), e.EventTypes()})
}

// Event is one event in the outbox.
type Event struct {
	ID          string     `gorm:"column:id;primaryKey"`
	TenantID    string     `gorm:"column:tenant_id"`
	Type        string     `gorm:"column:event_type"`
	Payload     string     `gorm:"column:payload"`
	CreatedAt   time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	FannedOutAt *time.Time `gorm:"column:fanned_out_at"`
}

// TableName is the GORM table of Event.
func (Event) TableName() string { return "integration_outbox" }

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// Delivery is one event for one endpoint: pending until the dispatcher
// delivered it or gave up. The attempts themselves are in the notify
// delivery log under MessageID.
type Delivery struct {
	ID         string     `gorm:"column:id;primaryKey" json:"id"`
	TenantID   string     `gorm:"column:tenant_id" json:"-"`
	EndpointID string     `gorm:"column:endpoint_id" json:"endpoint_id"`
	EventID    string     `gorm:"column:event_id" json:"event_id"`
	EventType  string     `gorm:"column:event_type" json:"event_type"`
	State      string     `gorm:"column:state" json:"state"`
	Attempts   int        `gorm:"column:attempts" json:"attempts"`
	StatusCode int        `gorm:"column:status_code" json:"status_code"`
	Error      string     `gorm:"column:error" json:"error,omitempty"`
	MessageID  string     `gorm:"column:message_id" json:"message_id,omitempty"`
	LeaseUntil *time.Time `gorm:"column:lease_until" json:"-"`
	CreatedAt  time.Time  `gorm:"column:created_at;autoCreateTime:false" json:"created_at"`
	UpdatedAt  time.Time  `gorm:"column:updated_at;autoUpdateTime:false" json:"updated_at"`
}

// TableName is the GORM table of Delivery.
func (Delivery) TableName() string { return "webhook_deliveries" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (d *Delivery) AfterFind(*gorm.DB) error {
	d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	if d.LeaseUntil != nil {
		t := d.LeaseUntil.UTC()
		d.LeaseUntil = &t
	}
	return nil
}
