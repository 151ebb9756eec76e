-- Where each secret may be injected, and how often a response carried a real
-- secret value back towards a sandbox. Portable SQL (SQLite and PostgreSQL).

-- +goose Up

-- inject is a JSON list of the request locations where the gateway may swap
-- the secret's placeholder for its value: "authorization" (the Authorization
-- header), "header:<Name>", "query", "path", "body". Secrets made before this
-- migration get the default, the Authorization header only: that narrows
-- what they did before (every header, the query, the path and small bodies),
-- on purpose, since an upstream that echoes a request hands the sandbox the
-- value. An admin widens it per secret.
ALTER TABLE secrets ADD COLUMN inject TEXT NOT NULL DEFAULT '["authorization"]';

-- secrets_reflected counts the real secret values the gateway found in the
-- connection's responses and rewrote back to their placeholders.
ALTER TABLE egress_events ADD COLUMN secrets_reflected INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE egress_events DROP COLUMN secrets_reflected;
ALTER TABLE secrets DROP COLUMN inject;
