package heraldmysql

import (
	"context"
	"fmt"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Exported for the package's external tests.
var (
	LockName   = lockName
	Statements = statements
)

// MigrateFirst applies only the first n migrations, as an older Herald
// did.
func (d *Driver) MigrateFirst(ctx context.Context, n int) error {
	return d.migrate(ctx, migrations[:n])
}

// Migrations returns the embedded migrations' names by version.
func Migrations() map[int]string {
	out := map[int]string{}
	for _, m := range migrations {
		out[m.Version] = m.Name
	}
	return out
}

// keysJSON is a list of keys as the claim's many-key statements take it.
var keysJSON = `[[0, "74", "6b30303032", 0], [1, "74", "6b30303034", 1]]` // t/k0002, t/k0004

// Plans returns the claim's statements by name with example arguments,
// for EXPLAIN.
func (d *Driver) Plans() map[string]struct {
	SQL  string
	Args []any
} {
	type plan = struct {
		SQL  string
		Args []any
	}
	retrying := func(prefix, suffix string) plan {
		where, args, _, err := sqlstore.RetryingQuery(heraldadmin.RetryFilter{Topic: "t", LastError: "boom"}, mysqlDialect, now)
		if err != nil {
			panic(err)
		}
		q, args, err := positional(prefix+` WHERE `+where+suffix, args)
		if err != nil {
			panic(err)
		}
		return plan{q, args}
	}
	return map[string]plan{
		"retry groups":    {d.names.render(retryGroupsSQL), []any{10}},
		"retrying list":   retrying(d.q.listPublished, ` ORDER BY available_at, seq LIMIT 100`),
		"retry now":       retrying(`UPDATE `+d.q.table+` SET available_at = `+now, ` AND available_at > `+now),
		"unordered claim": {d.q.claimReady, []any{100}},
		"walk keys":       {d.q.walkKeys + d.q.walkKeysEnd, []any{9, "t", "t", "k0150", 50}},
		"walk past topic": {d.q.walkKeys + fmt.Sprintf(walkPausedSQL, "?") + d.q.walkKeysEnd, []any{9, "", "", "", "t", 50}},
		"next topic":      {d.q.nextTopic, []any{""}},
		"key run":         {d.q.keyRun, []any{0, "t", "k0001", 10}},
		"key runs":        {d.q.keyRun + "\n\tUNION ALL\n\t" + d.q.keyAvailable, []any{0, "t", "k0001", 10, 1, "t", "k0002", 10}},
		"lock keys":       {d.q.lockKeys, []any{keysJSON}},
		"check keys": {d.q.keyCheck + "\n\tUNION ALL\n\t" + d.q.checkRows + "\n\tUNION ALL\n\t" + d.q.checkBlocked,
			[]any{0, "t", "k0001", 10, keysJSON, keysJSON}},
		"expired leases": {d.q.expired, []any{100}},
		"retention":      {`SELECT seq FROM ` + d.q.table + ` WHERE state = 'published' AND published_at < UTC_TIMESTAMP(6) ORDER BY published_at LIMIT 100`, nil},
	}
}
