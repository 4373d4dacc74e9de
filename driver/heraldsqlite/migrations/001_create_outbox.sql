-- The outbox table on SQLite. Same columns and meaning as on PostgreSQL;
-- timestamps are integer microseconds since the Unix epoch, by the
-- database clock ({{.Now}}).
CREATE TABLE {{.Table}} (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id             TEXT    NOT NULL UNIQUE DEFAULT (
                       lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' ||
                             substr(hex(randomblob(2)), 2) || '-' ||
                             substr('89ab', 1 + (abs(random()) % 4), 1) ||
                             substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))),
    topic          TEXT    NOT NULL CHECK (topic <> ''),
    key            TEXT    NOT NULL DEFAULT '',
    type           TEXT    NOT NULL DEFAULT '',
    aggregate_type TEXT    NOT NULL DEFAULT '',
    aggregate_id   TEXT    NOT NULL DEFAULT '',
    payload        BLOB    NOT NULL,
    headers        TEXT    NOT NULL DEFAULT '{}'
                           CHECK (json_valid(headers) AND json_type(headers) = 'object'),
    state          TEXT    NOT NULL DEFAULT 'ready'
                           CHECK (state IN ('ready', 'claimed', 'published', 'dead')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    available_at   INTEGER NOT NULL DEFAULT ({{.Now}}),
    created_at     INTEGER NOT NULL DEFAULT ({{.Now}}),
    claim_token    TEXT,
    claimed_by     TEXT,
    lease_until    INTEGER,
    published_at   INTEGER,
    dead_at        INTEGER,
    last_error     TEXT
);

CREATE INDEX {{.Name}}_ready_idx ON {{.Table}} (available_at, seq) WHERE state = 'ready';
CREATE INDEX {{.Name}}_claimed_idx ON {{.Table}} (lease_until) WHERE state = 'claimed';
CREATE INDEX {{.Name}}_published_idx ON {{.Table}} (published_at) WHERE state = 'published';
CREATE INDEX {{.Name}}_dead_idx ON {{.Table}} (topic, seq) WHERE state = 'dead';
