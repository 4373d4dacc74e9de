package heraldadmin

import (
	"context"
	"time"
)

// Published is what a replay reads from a store: the published events it
// still holds (see RelayConfig.Retention). Every driver implements it next
// to Admin.
type Published interface {
	// ListPublished returns up to f.Limit published rows matched by f, in
	// the order they were published (published_at, then the write order):
	// a key's events come in the order its consumers first received them.
	ListPublished(ctx context.Context, f PublishedFilter) ([]EventRow, error)
}

// PublishedFilter selects published events. Every field that is set
// narrows the selection; the zero filter selects every published event.
type PublishedFilter struct {
	IDs   []string
	Topic string
	// Key, when not nil, selects the events of this key ("" selects the
	// events without a key).
	Key  *string
	Type string
	// Since and Until bound the events' write time (created_at):
	// Since <= created_at < Until. Zero leaves that side open.
	Since, Until time.Time
	// After continues a listing after a row: the Position of the last row
	// of the previous page. The zero Position starts at the first row.
	After Position
	// Limit defaults to 100 and may be at most MaxListLimit.
	Limit int
}

// MaxListLimit bounds one page of ListPublished.
const MaxListLimit = 10000

// Position is a published row's place in publication order.
type Position struct {
	PublishedAt time.Time
	Seq         int64
}

// Position returns the row's place in publication order, for
// PublishedFilter.After; zero when the row is not published.
func (r EventRow) Position() Position {
	if r.PublishedAt == nil {
		return Position{}
	}
	return Position{PublishedAt: *r.PublishedAt, Seq: r.Seq}
}
