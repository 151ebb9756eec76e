package usage

import (
	"context"
	"fmt"
)

// UserNames maps the ids of the people and tokens that started the
// tenant's metered sandboxes to the names recorded with them, for pages
// that group usage by user.
func (s *Store) UserNames(ctx context.Context, tenantID string) (map[string]string, error) {
	var rows []struct {
		UserID   string `gorm:"column:user_id"`
		UserName string `gorm:"column:user_name"`
	}
	err := s.db.WithContext(ctx).Model(&Meter{}).Distinct("user_id", "user_name").
		Where("tenant_id = ? AND user_id <> ''", tenantID).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("user names of tenant %s: %w", tenantID, err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		if r.UserName != "" {
			out[r.UserID] = r.UserName
		}
	}
	return out, nil
}

// Meters returns the tenant's meters of the given sandboxes (those that
// have one), keyed by sandbox id.
func (s *Store) Meters(ctx context.Context, tenantID string, sandboxIDs []string) (map[string]Meter, error) {
	out := map[string]Meter{}
	if len(sandboxIDs) == 0 {
		return out, nil
	}
	var ms []Meter
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND sandbox_id IN ?", tenantID, sandboxIDs).Find(&ms).Error; err != nil {
		return nil, fmt.Errorf("usage meters of tenant %s: %w", tenantID, err)
	}
	for _, m := range ms {
		out[m.SandboxID] = m
	}
	return out, nil
}
