-- Relays, as on PostgreSQL and SQLite: every relay running on the outbox
-- table records itself here by a heartbeat every few seconds
-- (herald.Heartbeats), so that herald status and any relay's admin page
-- list all of them: owner, Herald version, start, leased rows, published
-- count, last claim. A relay deletes its row when it stops; the row of a
-- relay that died expires (expires_at) and is deleted by the next heartbeat
-- of any relay. Times are the database clock's, DATETIME(6) in UTC. No
-- relay reads this table to decide anything: it is for operators.
--
-- owner is VARBINARY (byte order, as Go sorts; at most 1024 bytes, which
-- Herald checks). One statement, run again as a no-op if the migration was
-- cut short before its row was recorded.
CREATE TABLE IF NOT EXISTS {{.Relays}} (
    owner         VARBINARY(1024) NOT NULL,
    version       VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    started_at    DATETIME(6)     NOT NULL,
    heartbeat_at  DATETIME(6)     NOT NULL,
    expires_at    DATETIME(6)     NOT NULL,
    last_claim_at DATETIME(6)     NULL,
    leased        BIGINT          NOT NULL DEFAULT 0,
    published     BIGINT          NOT NULL DEFAULT 0,
    PRIMARY KEY (owner),
    CONSTRAINT {{.Name}}_relay_owner_set CHECK (owner <> '')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
