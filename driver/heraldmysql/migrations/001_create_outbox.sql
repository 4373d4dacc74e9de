-- The outbox table on MySQL 8 and MariaDB 10.6+. Same columns, states and
-- meaning as on PostgreSQL and SQLite, and the same stable contract:
-- programs in other languages insert rows with plain SQL, giving topic,
-- `key` (a reserved word: quote it) and payload and leaving every other
-- column to its default.
--
-- One statement, so that the migration is all or nothing: MySQL commits
-- each DDL statement on its own, and a CREATE TABLE IF NOT EXISTS that
-- ran before a crash, without the row recording it, is run again as a
-- no-op.
--
-- seq is the primary key: InnoDB clusters rows by it, so inserts append
-- and a claim's rows are read in seq order. topic, `key` and the other
-- texts Herald compares are VARBINARY: compared byte for byte (no
-- collation folds case, accents or trailing spaces), sorted as Go sorts
-- strings, and short enough in bytes for the key index (Herald caps a
-- topic at 255 bytes and the other texts at 1024). Timestamps are
-- DATETIME(6) in UTC from UTC_TIMESTAMP(6): microseconds, years 1000 to
-- 9999, no time zone conversion by the server or the session.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    seq            BIGINT          NOT NULL AUTO_INCREMENT,
    -- A random (version 4) UUID unless the writer gives one, in lower-case
    -- canonical text: 122 bits of MD5 over the server's UUID() (unique
    -- per call) and RAND(), with the version and variant digits set.
    id             CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT (
                       INSERT(INSERT(INSERT(INSERT(
                           INSERT(INSERT(MD5(CONCAT(UUID(), RAND())), 17, 1, SUBSTR('89ab', 1 + FLOOR(RAND() * 4), 1)), 13, 1, '4'),
                       21, 0, '-'), 17, 0, '-'), 13, 0, '-'), 9, 0, '-')),
    topic          VARBINARY(255)  NOT NULL,
    `key`          VARBINARY(1024) NOT NULL DEFAULT '',
    type           VARBINARY(1024) NOT NULL DEFAULT '',
    aggregate_type VARBINARY(1024) NOT NULL DEFAULT '',
    aggregate_id   VARBINARY(1024) NOT NULL DEFAULT '',
    -- The event contract's versions: the payload's schema version (1
    -- unless the producer says otherwise) and, optionally, the
    -- aggregate's version after the event (NULL: none).
    event_version     INT          NOT NULL DEFAULT 1,
    aggregate_version BIGINT       NULL,
    payload        LONGBLOB        NOT NULL,
    headers        JSON            NOT NULL DEFAULT ('{}'),
    state          VARCHAR(9) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'ready',
    attempts       INT             NOT NULL DEFAULT 0,
    available_at   DATETIME(6)     NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    created_at     DATETIME(6)     NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    claim_token    CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
    claimed_by     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    lease_until    DATETIME(6)     NULL,
    published_at   DATETIME(6)     NULL,
    dead_at        DATETIME(6)     NULL,
    last_error     MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    parked         BOOLEAN         NOT NULL DEFAULT FALSE,

    PRIMARY KEY (seq),
    UNIQUE KEY {{.Name}}_id_idx (id),
    -- MySQL has no partial indexes: the state leads each index instead, so
    -- that every read of the relay is a range of one state. An unordered
    -- claim is one range scan of the ready rows in (available_at, seq)
    -- order, however many published or dead rows the table holds.
    KEY {{.Name}}_ready_idx (state, available_at, seq),
    -- Per-key ordering. An ordered claim walks the keys with ready rows
    -- and reads a key's lowest ready rows through this index; with the
    -- state 'claimed' or 'dead' it finds the keys a claim leaves alone
    -- (an event in flight, or parked behind a dead one), and the rescuer
    -- finds the claimed rows.
    KEY {{.Name}}_key_idx (state, topic, `key`, seq),
    -- Retention deletes, and a replay lists, published rows by
    -- published_at.
    KEY {{.Name}}_published_idx (state, published_at, seq),

    -- The columns the relay owns refuse values the relay never writes,
    -- as on PostgreSQL. Each rule is named (names are unique per
    -- database on MySQL, hence the table's name in each), so that a
    -- refused INSERT says which rule it broke.
    CONSTRAINT {{.Name}}_id_form
        CHECK (id REGEXP '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
    CONSTRAINT {{.Name}}_topic_set CHECK (topic <> ''),
    CONSTRAINT {{.Name}}_headers_object CHECK (JSON_VALID(headers) AND JSON_TYPE(headers) = 'OBJECT'),
    CONSTRAINT {{.Name}}_state_known CHECK (state IN ('ready', 'claimed', 'published', 'dead')),
    CONSTRAINT {{.Name}}_attempts_range CHECK (attempts BETWEEN 0 AND 1000000),
    CONSTRAINT {{.Name}}_event_version_positive CHECK (event_version >= 1),
    CONSTRAINT {{.Name}}_aggregate_version_positive CHECK (aggregate_version >= 1),
    -- A zero date ('0000-00-00', which MySQL admits without NO_ZERO_DATE)
    -- is no time at all.
    CONSTRAINT {{.Name}}_times_set CHECK (available_at >= '1000-01-01' AND created_at >= '1000-01-01'),
    CONSTRAINT {{.Name}}_claim_has_lease
        CHECK (state <> 'claimed' OR (claim_token IS NOT NULL AND lease_until IS NOT NULL)),
    CONSTRAINT {{.Name}}_parked_is_dead CHECK (NOT parked OR state = 'dead')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
