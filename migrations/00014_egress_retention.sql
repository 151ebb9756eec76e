-- Egress events: retention and rate limits. Events older than the
-- retention (STOCKADE_EGRESS_RETENTION_DAYS) are pruned by started_at
-- across tenants, so that column gets an index of its own. suppressed
-- counts the connections of the same sandbox, since its previous row,
-- that the per-sandbox rate limit kept out of the table (their bytes are
-- still in the usage ledger).

-- +goose Up
ALTER TABLE egress_events ADD COLUMN suppressed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX egress_events_started ON egress_events (started_at);

-- +goose Down
DROP INDEX egress_events_started;
ALTER TABLE egress_events DROP COLUMN suppressed;
