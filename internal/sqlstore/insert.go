package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
)

// TupleInserter is the herald.WriteDriver of the drivers on database/sql
// (SQLite, MySQL): messages go in order, in multi-row INSERT ... VALUES
// statements of the caller's transaction, so their seq follows the order
// of the call.
type TupleInserter struct {
	driver        string // names the driver in errors: heraldsqlite
	prefix, tuple string // INSERT ... VALUES, and one message's (?, ?, ...)
	rows, bytes   int
	timeArg       func(time.Time) any
	full          string // the statement of rows messages
}

// insertColumns is the number of parameters of one message's tuple.
const insertColumns = 11

// NewTupleInserter returns an inserter of at most rows messages per
// statement and, when bytes > 0, about at most bytes of payload (a larger
// payload goes alone). timeArg encodes AvailableAt in the column's type.
func NewTupleInserter(driver, prefix, tuple string, rows, bytes int, timeArg func(time.Time) any) *TupleInserter {
	in := &TupleInserter{driver: driver, prefix: prefix, tuple: tuple, rows: rows, bytes: bytes, timeArg: timeArg}
	in.full = in.statement(rows)
	return in
}

// statement returns the INSERT of n messages: one VALUES tuple each.
func (in *TupleInserter) statement(n int) string {
	if n == in.rows && in.full != "" {
		return in.full
	}
	var b strings.Builder
	b.Grow(len(in.prefix) + n*(len(in.tuple)+2))
	b.WriteString(in.prefix)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(in.tuple)
	}
	return b.String()
}

// InsertTx implements herald.WriteDriver for *sql.Tx.
func (in *TupleInserter) InsertTx(ctx context.Context, tx *sql.Tx, msgs []herald.Message) error {
	if tx == nil {
		return fmt.Errorf("%s: WriteTx: tx is nil", in.driver)
	}
	return in.Insert(ctx, tx, msgs)
}

// Insert writes msgs through exec, a transaction (the caller checked).
func (in *TupleInserter) Insert(ctx context.Context, exec interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}, msgs []herald.Message) error {
	for len(msgs) > 0 {
		n, size := 0, 0
		for n < len(msgs) && n < in.rows && (n == 0 || in.bytes <= 0 || size+len(msgs[n].Payload) <= in.bytes) {
			size += len(msgs[n].Payload)
			n++
		}
		chunk := msgs[:n]
		msgs = msgs[n:]
		args := make([]any, 0, len(chunk)*insertColumns)
		for _, m := range chunk {
			h, err := EncodeHeaders(m.Headers)
			if err != nil {
				return fmt.Errorf("%s: %w", in.driver, err)
			}
			var available any // nil: the database clock's now
			if !m.AvailableAt.IsZero() {
				available = in.timeArg(m.AvailableAt)
			}
			payload := m.Payload
			if payload == nil {
				payload = []byte{} // never NULL
			}
			var aggregateVersion any // nil: NULL, none
			if m.AggregateVersion > 0 {
				aggregateVersion = m.AggregateVersion
			}
			args = append(args, m.ID, m.Topic, m.Key, m.Type, m.AggregateType, m.AggregateID, payload, h, available,
				max(m.EventVersion, 1), aggregateVersion)
		}
		if _, err := exec.ExecContext(ctx, in.statement(len(chunk)), args...); err != nil {
			return fmt.Errorf("%s: writing %d events: %w", in.driver, len(chunk), err)
		}
	}
	return nil
}
