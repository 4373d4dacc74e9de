package heraldpg

import "context"

// MigrateTo applies the migrations up to version, so that a test can write
// rows into an older table before a later migration runs.
func (d *Driver) MigrateTo(ctx context.Context, version int) error {
	return d.migrate(ctx, migrations[:version])
}

// SerialClaims makes d send a claim's statements one by one, as before
// they were pipelined.
func (d *Driver) SerialClaims() { d.serialClaims = true }

// ClaimHoldsRows is what d's acknowledgement of the claim token assumes:
// false only for a claim d made that holds leases alone.
func (d *Driver) ClaimHoldsRows(token string) bool { return d.leaseOnly.hasRows(token) }
