-- The example's business table. Herald's outbox table is created by
-- heraldpg's migrations, not here: sqlc never queries it.
CREATE TABLE orders (
    id          text PRIMARY KEY,
    customer    text NOT NULL,
    total_cents bigint NOT NULL
);
