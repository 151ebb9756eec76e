-- +goose Up
-- E2B envd access tokens (handlers/e2b): one per create or connect of a
-- sandbox through the E2B control plane; only the SHA-256 of the secret
-- is kept. Bound to tenant and sandbox, and to the caller that got it
-- (the actor of what is done with it); deleted when the sandbox ends.
CREATE TABLE e2b_access_tokens (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    sandbox_id  TEXT NOT NULL,
    token_hash  TEXT NOT NULL UNIQUE,
    actor_kind  TEXT NOT NULL,
    actor_id    TEXT NOT NULL,
    actor_name  TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL
);
CREATE INDEX e2b_access_tokens_sandbox ON e2b_access_tokens (tenant_id, sandbox_id);

-- +goose Down
DROP TABLE e2b_access_tokens;
