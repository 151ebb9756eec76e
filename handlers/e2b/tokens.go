package e2b

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// accessToken is one envd access token (table e2b_access_tokens, migration
// 00031): what create and connect hand out as envdAccessToken. Only the
// SHA-256 of the secret is stored; the row binds it to one tenant and
// sandbox and to the caller that got it, who is the actor of everything
// done with it. Rows go when their sandbox ends (Server.SandboxEnded).
type accessToken struct {
	ID        string    `gorm:"column:id;primaryKey"`
	TenantID  string    `gorm:"column:tenant_id"`
	SandboxID string    `gorm:"column:sandbox_id"`
	TokenHash string    `gorm:"column:token_hash"`
	ActorKind string    `gorm:"column:actor_kind"`
	ActorID   string    `gorm:"column:actor_id"`
	ActorName string    `gorm:"column:actor_name"`
	CreatedAt time.Time `gorm:"column:created_at"`
}

// TableName is the GORM table of accessToken.
func (accessToken) TableName() string { return "e2b_access_tokens" }

func hashToken(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// issueToken stores a new access token for the tenant's sandbox and
// returns its secret.
func (s *Server) issueToken(ctx context.Context, actor audit.Actor, tenantID, sandboxID string) (string, error) {
	secret := "e2bat_" + randomHex(32)
	row := accessToken{ID: randomHex(16), TenantID: tenantID, SandboxID: sandboxID, TokenHash: hashToken(secret),
		ActorKind: actor.Kind, ActorID: actor.ID, ActorName: actor.Name, CreatedAt: s.now().UTC()}
	if err := s.db.WithContext(ctx).Create(&row).Error; err != nil {
		return "", fmt.Errorf("e2b: store access token: %w", err)
	}
	return secret, nil
}

// lookupToken finds the access token of secret: errdefs.ErrUnauthorized
// when there is none.
func (s *Server) lookupToken(ctx context.Context, secret string) (accessToken, error) {
	var row accessToken
	if secret == "" {
		return row, errdefs.ErrUnauthorized
	}
	err := s.db.WithContext(ctx).Where("token_hash = ?", hashToken(secret)).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return row, errdefs.ErrUnauthorized
	}
	if err != nil {
		return row, fmt.Errorf("e2b: look up access token: %w", err)
	}
	return row, nil
}

// SandboxEnded drops the access tokens of an ended sandbox
// (sandbox.Service.OnEnd).
func (s *Server) SandboxEnded(tenantID, sandboxID, _ string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID).Delete(&accessToken{}).Error; err != nil {
		s.log.Warn("e2b: drop access tokens of an ended sandbox", "sandbox", sandboxID, "err", err)
	}
}
