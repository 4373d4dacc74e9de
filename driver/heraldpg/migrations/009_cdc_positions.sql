-- Change-data-capture: the furthest WAL position a change-data-capture
-- relay let its replication slot confirm, recorded before the slot is told.
-- A slot of the same name whose confirmed position is past it was not
-- moved by Herald: it was dropped and created again (or confirmed by
-- another program), and the events committed in between were never read
-- from it. The relay refuses such a slot instead of skipping them
-- silently (heraldcdc). One row per slot; nothing else reads it.
CREATE TABLE {{.Schema}}."{{.Name}}_cdc" (
    slot       text        PRIMARY KEY CHECK (slot <> ''),
    position   pg_lsn      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
