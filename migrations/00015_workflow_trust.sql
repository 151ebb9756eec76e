-- Workflow runs say how far their trigger was trusted, and GitHub
-- deliveries are remembered by the digest of their body too. Portable SQL
-- (SQLite and PostgreSQL).

-- +goose Up

-- trust: trusted (the secrets the policy grants and the checkout token),
-- untrusted (neither: a fork's pull request), skipped (nothing ran: a fork
-- pull request without allow_forks, a comment by someone not in
-- comment_authors). '' for runs made before trust was recorded.
-- trust_reason says who or what the run's code came from.
ALTER TABLE workflow_runs ADD COLUMN trust TEXT NOT NULL DEFAULT '';
ALTER TABLE workflow_runs ADD COLUMN trust_reason TEXT NOT NULL DEFAULT '';

-- The SHA-256 of the delivery's body (hex). A captured body sent again
-- with a new X-GitHub-Delivery id is the same delivery: it starts nothing.
-- '' for deliveries recorded before, which the partial index leaves out.
ALTER TABLE github_deliveries ADD COLUMN body_sha256 TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX github_deliveries_body ON github_deliveries (tenant_id, body_sha256) WHERE body_sha256 <> '';

-- +goose Down
DROP INDEX github_deliveries_body;
ALTER TABLE github_deliveries DROP COLUMN body_sha256;
ALTER TABLE workflow_runs DROP COLUMN trust_reason;
ALTER TABLE workflow_runs DROP COLUMN trust;
