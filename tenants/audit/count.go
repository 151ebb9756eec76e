package audit

import (
	"context"
	"fmt"
)

// Count is how many of the tenant's events match f (Before and Limit
// ignored): the figure of a dashboard tile, without reading the rows.
func (l *Log) Count(ctx context.Context, tenantID string, f Filter) (int64, error) {
	f.Before = ""
	q, err := l.query(ctx, tenantID, f)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count audit events of tenant %s: %w", tenantID, err)
	}
	return n, nil
}
