-- API tokens remember the person behind them: created_by_user_id is the
-- user who made the token, or who made the token that made it (a token
-- created through the API inherits its creator's person); NULL for tokens
-- an operator made with `stockade token create`. Authentication checks that
-- person is still an active member and caps the token's role at theirs;
-- removing the member revokes their tokens.
-- Portable SQL (SQLite and PostgreSQL).

-- +goose Up
ALTER TABLE api_tokens ADD COLUMN created_by_user_id TEXT NULL;

UPDATE api_tokens SET created_by_user_id = created_by
WHERE created_by IN (SELECT id FROM users);

-- Tokens made by tokens, following chains of up to three tokens.
UPDATE api_tokens SET created_by_user_id = (SELECT p.created_by_user_id FROM api_tokens p WHERE p.id = api_tokens.created_by)
WHERE created_by_user_id IS NULL AND created_by IN (SELECT id FROM api_tokens);
UPDATE api_tokens SET created_by_user_id = (SELECT p.created_by_user_id FROM api_tokens p WHERE p.id = api_tokens.created_by)
WHERE created_by_user_id IS NULL AND created_by IN (SELECT id FROM api_tokens);
UPDATE api_tokens SET created_by_user_id = (SELECT p.created_by_user_id FROM api_tokens p WHERE p.id = api_tokens.created_by)
WHERE created_by_user_id IS NULL AND created_by IN (SELECT id FROM api_tokens);

CREATE INDEX api_tokens_creator ON api_tokens (tenant_id, created_by_user_id);

-- +goose Down
DROP INDEX api_tokens_creator;
ALTER TABLE api_tokens DROP COLUMN created_by_user_id;
