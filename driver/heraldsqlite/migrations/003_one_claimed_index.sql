-- The claimed rows are few (what relays have in flight), and the blocked
-- index holds them all: the rescuer finds expired leases there. One index
-- fewer to write on every claim.
DROP INDEX {{.Name}}_claimed_idx;
