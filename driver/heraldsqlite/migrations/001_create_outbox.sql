-- The outbox table on SQLite. Same columns and meaning as on PostgreSQL, and
-- the same stable contract: programs in other languages insert rows with
-- plain SQL, giving topic, key and payload and leaving every other column to
-- its default. Timestamps are integer microseconds since the Unix epoch, by
-- the database clock (nowMicros in queries.go, filled in as {{.Now}}).
--
-- seq is the rowid: AUTOINCREMENT so that a deleted row's seq is never
-- handed out again and seq keeps increasing in insert order.
CREATE TABLE {{.Table}} (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    -- A random (version 4) UUID unless the writer gives one. Lower-case
    -- canonical text, as PostgreSQL's uuid type prints it.
    id             TEXT    NOT NULL UNIQUE DEFAULT (
                       lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' ||
                             substr(hex(randomblob(2)), 2) || '-' ||
                             substr('89ab', 1 + (abs(random()) % 4), 1) ||
                             substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))))
                   CHECK (id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    topic          TEXT    NOT NULL CHECK (topic <> ''),
    key            TEXT    NOT NULL DEFAULT '',
    type           TEXT    NOT NULL DEFAULT '',
    aggregate_type TEXT    NOT NULL DEFAULT '',
    aggregate_id   TEXT    NOT NULL DEFAULT '',
    -- Bytes; a payload inserted as text is kept byte for byte too.
    payload        BLOB    NOT NULL,
    headers        TEXT    NOT NULL DEFAULT '{}'
                   CHECK (typeof(headers) = 'text' AND json_valid(headers) AND json_type(headers) = 'object'),
    state          TEXT    NOT NULL DEFAULT 'ready'
                   CHECK (state IN ('ready', 'claimed', 'published', 'dead')),
    attempts       INTEGER NOT NULL DEFAULT 0 CHECK (typeof(attempts) = 'integer'),
    -- A timestamp given as text would sort after every integer and never
    -- become due: refuse it.
    available_at   INTEGER NOT NULL DEFAULT ({{.Now}}) CHECK (typeof(available_at) = 'integer'),
    created_at     INTEGER NOT NULL DEFAULT ({{.Now}}) CHECK (typeof(created_at) = 'integer'),
    claim_token    TEXT,
    claimed_by     TEXT,
    lease_until    INTEGER,
    published_at   INTEGER,
    dead_at        INTEGER,
    last_error     TEXT
);

-- A claim is one probe of this index, however many published or dead rows
-- the table holds: it contains ready rows only.
CREATE INDEX {{.Name}}_ready_idx ON {{.Table}} (available_at, seq) WHERE state = 'ready';
-- The rescuer looks for expired leases among claimed rows only.
CREATE INDEX {{.Name}}_claimed_idx ON {{.Table}} (lease_until) WHERE state = 'claimed';
-- Retention deletes the oldest published rows first.
CREATE INDEX {{.Name}}_published_idx ON {{.Table}} (published_at) WHERE state = 'published';
-- Operators list dead letters by topic.
CREATE INDEX {{.Name}}_dead_idx ON {{.Table}} (topic, seq) WHERE state = 'dead';
