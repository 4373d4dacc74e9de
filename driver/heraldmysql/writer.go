package heraldmysql

import (
	"database/sql"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// NewWriter returns a writer that joins a caller's database/sql transaction
// on MySQL or MariaDB:
//
//	err := w.WriteTx(ctx, tx, herald.Message{Topic: "orders", Payload: body})
//
// The INSERT runs at the transaction's own isolation level; it takes no
// locks that would hold up a relay.
func NewWriter(cfg *Config) (*herald.Writer[*sql.Tx], error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	q := newQueries(n)
	ins := sqlstore.NewTupleInserter("heraldmysql", q.insertPrefix, q.insertTuple, rowsPerInsert, bytesPerInsert,
		func(t time.Time) any { return formatTime(t) })
	var wc *herald.WriterConfig
	if cfg != nil {
		wc = &herald.WriterConfig{MaxPayloadBytes: cfg.MaxPayloadBytes}
	}
	return herald.NewWriter[*sql.Tx](ins, wc)
}

// rowsPerInsert is the most messages one INSERT carries, and
// bytesPerInsert about the most payload bytes: a larger call is split into
// several statements of the same transaction. A statement stays well under
// the server's max_allowed_packet (16 MiB by default on MariaDB) and the
// protocol's 65,535 placeholders; a payload larger than bytesPerInsert
// goes alone.
const (
	rowsPerInsert  = 128
	bytesPerInsert = 4 << 20
)
