package heraldsqlite

import "context"

// FileDSN exposes the data source name Open builds, for the fuzz tests.
var FileDSN = fileDSN

// DSNParams exposes the parameters every connection gets.
var DSNParams = dsnParams

// MigrateTo applies the migrations up to version, so that a test can write
// rows into an older table before a later migration runs.
func (d *Driver) MigrateTo(ctx context.Context, version int) error {
	return d.migrate(ctx, migrations[:version])
}
