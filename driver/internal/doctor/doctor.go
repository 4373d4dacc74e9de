// Package doctor holds what the drivers' Diagnose methods share: the
// clock comparison, the severity of a transaction held past the lease, and
// the wording of ages, sizes and quoted queries.
package doctor

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// CheckClock is the check of Clock's finding.
const CheckClock = "clock"

// ClockSkewLimit is the difference between the relay's clock and the
// database's above which Clock warns: leases run on the database's clock,
// but the relay's logs, backoff and ages read its own.
const ClockSkewLimit = time.Second

// queryShown is how much of a query a finding quotes.
const queryShown = 60

// Clock judges the database's clock, dbNow, read between before and after
// on the relay's: the skew is known to within half that round trip.
func Clock(before, dbNow, after time.Time) heraldspec.Finding {
	mid := before.Add(after.Sub(before) / 2)
	skew := dbNow.Sub(mid)
	slack := after.Sub(before) / 2
	if math.Abs(float64(skew)) > float64(ClockSkewLimit+slack) {
		ahead := "ahead of"
		if skew < 0 {
			ahead, skew = "behind", -skew
		}
		return heraldspec.Finding{Severity: heraldspec.SeverityWarning, Check: CheckClock,
			Message: fmt.Sprintf("the database's clock is %s %s this host's (more than %s)", RoundAge(skew), ahead, ClockSkewLimit),
			Fix:     "synchronise both hosts' clocks with NTP (chrony, systemd-timesyncd)"}
	}
	return heraldspec.Finding{Severity: heraldspec.SeverityOK, Check: CheckClock,
		Message: fmt.Sprintf("the database's clock is within %s of this host's", ClockSkewLimit)}
}

// HeldSeverity is how much a transaction open for age matters: past the
// lease a warning; past ten leases, an error, as it has kept every dead row
// version of the outbox for that long and the claims wade through them.
func HeldSeverity(age, lease time.Duration) heraldspec.Severity {
	if age > 10*lease {
		return heraldspec.SeverityError
	}
	return heraldspec.SeverityWarning
}

// QuoteQuery is the first characters of another session's query, its
// secrets scrubbed (before cutting, so that no half of one survives) and
// its lines joined.
func QuoteQuery(q string) string {
	q = strings.Join(strings.Fields(herald.Scrub(q)), " ")
	if q == "" {
		return "(none)"
	}
	if utf8.RuneCountInString(q) > queryShown {
		r := []rune(q)
		q = string(r[:queryShown]) + "..."
	}
	return q
}

// LeaseText prints the lease as the flag takes it: 1m, not 1m0s.
func LeaseText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// RoundAge prints an age an operator can read.
func RoundAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// BytesText prints a size in binary units.
func BytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// Schema judges the outbox table's migration version against the latest
// the driver knows; migrate is the command that brings it there.
func Schema(table string, version, latest int, migrate string) heraldspec.Finding {
	f := heraldspec.Finding{Check: "schema", Severity: heraldspec.SeverityError, Fix: migrate}
	switch {
	case version == 0:
		f.Message = fmt.Sprintf("outbox table %s does not exist (no migration applied)", table)
	case version < latest:
		f.Message = fmt.Sprintf("outbox table %s is at schema version %d; this herald needs %d", table, version, latest)
	case version > latest:
		f.Message = fmt.Sprintf("outbox table %s is at schema version %d, newer than this herald knows (%d)", table, version, latest)
		f.Fix = "run a herald as new as the one that migrated the table"
	default:
		f.Severity, f.Fix = heraldspec.SeverityOK, ""
		f.Message = fmt.Sprintf("outbox table %s is at schema version %d, this herald's", table, version)
	}
	return f
}
