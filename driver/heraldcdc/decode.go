package heraldcdc

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// decoder turns pgoutput messages into transactions of events.
type decoder struct {
	relations     map[uint32]*pglogrepl.RelationMessage
	schema, table string
	slot          string
	cur           *Transaction // between Begin and Commit
}

// decode reads one message; done is true with a whole transaction at its
// commit. heartbeat is the position of one of the stream's heartbeat
// messages (see Config.HeartbeatInterval), zero otherwise.
func (d *decoder) decode(wal []byte) (tx Transaction, done bool, heartbeat pglogrepl.LSN, err error) {
	msg, err := pglogrepl.Parse(wal)
	if err != nil {
		return tx, false, 0, fmt.Errorf("heraldcdc: decoding pgoutput: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.LogicalDecodingMessage:
		// Only a non-transactional message is decoded at its own place in
		// the WAL, between transactions; one of another program (another
		// prefix) or another slot's stream is no concern of this one.
		if d.cur == nil && !m.Transactional && m.Prefix == heartbeatPrefix && string(m.Content) == d.slot {
			return tx, false, m.LSN, nil
		}
	case *pglogrepl.RelationMessage:
		d.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		d.cur = &Transaction{CommitTime: m.CommitTime}
	case *pglogrepl.InsertMessage:
		rel, ok := d.relations[m.RelationID]
		switch {
		case !ok:
			return tx, false, 0, fmt.Errorf("heraldcdc: insert into relation %d, which was never described", m.RelationID)
		case d.cur == nil:
			return tx, false, 0, fmt.Errorf("heraldcdc: insert outside a transaction")
		case rel.Namespace != d.schema || rel.RelationName != d.table:
			return tx, false, 0, nil // another table of the publication
		}
		env, bad := envelope(rel, m.Tuple)
		switch {
		case polled(rel, m.Tuple):
			d.cur.Polled = append(d.cur.Polled, env.ID)
		case bad != nil:
			// A row that cannot be read is not the stream's failure: it
			// goes to the dead letters, saying why, and the stream goes on.
			d.cur.Unreadable = append(d.cur.Unreadable, herald.Failure{ID: env.ID, Outcome: herald.OutcomeDead, Error: bad.Error()})
		default:
			d.cur.Events = append(d.cur.Events, env)
		}
	case *pglogrepl.CommitMessage:
		if d.cur == nil {
			return tx, false, 0, fmt.Errorf("heraldcdc: commit outside a transaction")
		}
		tx, d.cur = *d.cur, nil
		tx.Commit, tx.End = m.CommitLSN, m.TransactionEndLSN
		return tx, true, 0, nil
	}
	return tx, false, 0, nil
}

// streamedState is the state of a row inserted for the change stream
// (driver/heraldpg's migration 008).
const streamedState = "streamed"

// polled reports whether an inserted row belongs to the polling path: its
// state is there and is not streamed. Such a row was inserted ready before
// the table's default became streamed, or written back by a relay
// (herald.StreamStore.Return inserts a row that retention deleted
// meanwhile, as ready or dead): a claim delivers it, or nothing should,
// and handing it out here too would publish it twice. A table without a
// state column, or a NULL state, is read as streamed.
func polled(rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData) bool {
	if tuple == nil {
		return false
	}
	for i, c := range rel.Columns {
		if c.Name == "state" && i < len(tuple.Columns) {
			col := tuple.Columns[i]
			return col.DataType == pglogrepl.TupleDataTypeText && string(col.Data) != streamedState
		}
	}
	return false
}

// envelope reads an inserted outbox row. Values are in text format: the
// replication connection fixes DateStyle ISO, TimeZone UTC and hex bytea.
func envelope(rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData) (herald.Envelope, error) {
	var env herald.Envelope
	if tuple == nil || len(tuple.Columns) != len(rel.Columns) {
		return env, fmt.Errorf("the row's columns do not match the table's")
	}
	var problem error
	for i, col := range tuple.Columns {
		if col.DataType != pglogrepl.TupleDataTypeText {
			continue // NULL, or an unchanged TOAST value (never in an insert)
		}
		v := string(col.Data)
		var err error
		switch rel.Columns[i].Name {
		case "id":
			env.ID = v
		case "seq":
			env.Seq, err = strconv.ParseInt(v, 10, 64)
		case "topic":
			env.Topic = v
		case "key":
			env.Key = v
		case "type":
			env.Type = v
		case "aggregate_type":
			env.AggregateType = v
		case "aggregate_id":
			env.AggregateID = v
		case "event_version":
			env.EventVersion, err = strconv.Atoi(v)
		case "aggregate_version": // NULL, none, is skipped above
			env.AggregateVersion, err = strconv.ParseInt(v, 10, 64)
		case "payload":
			env.Payload, err = hex.DecodeString(strings.TrimPrefix(v, `\x`))
		case "headers":
			env.Headers, err = sqlstore.DecodeHeaders(col.Data)
		case "created_at":
			env.CreatedAt, err = time.Parse("2006-01-02 15:04:05.999999Z07", v)
		case "attempts":
			env.Attempt, err = strconv.Atoi(v)
		}
		if err != nil && problem == nil {
			problem = fmt.Errorf("column %s: %w", rel.Columns[i].Name, err)
		}
	}
	env.Attempt++ // the attempt this delivery is
	if env.EventVersion == 0 {
		env.EventVersion = 1 // a table from before the versions' migration
	}
	return env, problem
}
