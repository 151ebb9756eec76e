package audit

// SetPageSize lets tests make Stream page through small pages.
func SetPageSize(l *Log, n int) { l.pageSize = n }
