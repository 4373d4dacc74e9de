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

// decoder turns pgoutput messages into parts of transactions (see
// Transaction): a part ends once it holds partRows rows or partBytes
// bytes, and at the commit.
//
// Handing a transaction out before its commit message is safe: without
// the streaming option (Open does not ask for it), the walsender decodes
// a transaction's changes in its reorder buffer and sends BEGIN, the
// changes and COMMIT only once the transaction committed; an aborted one
// is never sent. So every row is committed when it arrives, and BEGIN
// carries the commit's position and time already. Only the end of the
// commit record, the position to confirm, comes with COMMIT.
type decoder struct {
	relations           map[uint32]*pglogrepl.RelationMessage
	schema, table       string
	slot                string
	partRows, partBytes int
	cur                 *Transaction // the part being filled, between Begin and Commit
}

// decode reads one message; ready is true with a part to hand out: one
// that reached the part size, or a transaction's last at its commit.
// heartbeat is the position of one of the stream's heartbeat messages (see
// Config.HeartbeatInterval), zero otherwise.
func (d *decoder) decode(wal []byte) (part Transaction, ready bool, heartbeat pglogrepl.LSN, err error) {
	msg, err := pglogrepl.Parse(wal)
	if err != nil {
		return part, false, 0, fmt.Errorf("heraldcdc: decoding pgoutput: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.LogicalDecodingMessage:
		// Only a non-transactional message is decoded at its own place in
		// the WAL, between transactions; one of another program (another
		// prefix) or another slot's stream is no concern of this one.
		if d.cur == nil && !m.Transactional && m.Prefix == heartbeatPrefix && string(m.Content) == d.slot {
			return part, false, m.LSN, nil
		}
	case *pglogrepl.RelationMessage:
		d.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		d.cur = &Transaction{Commit: m.FinalLSN, CommitTime: m.CommitTime, size: partOverhead}
	case *pglogrepl.InsertMessage:
		rel, ok := d.relations[m.RelationID]
		switch {
		case !ok:
			return part, false, 0, fmt.Errorf("heraldcdc: insert into relation %d, which was never described", m.RelationID)
		case d.cur == nil:
			return part, false, 0, fmt.Errorf("heraldcdc: insert outside a transaction")
		case rel.Namespace != d.schema || rel.RelationName != d.table:
			return part, false, 0, nil // another table of the publication
		}
		d.add(rel, m.Tuple)
		if d.cur.rows() >= d.partRows || d.cur.size >= d.partBytes {
			part, d.cur = *d.cur, &Transaction{Commit: d.cur.Commit, CommitTime: d.cur.CommitTime, Part: d.cur.Part + 1, size: partOverhead}
			return part, true, 0, nil
		}
	case *pglogrepl.CommitMessage:
		if d.cur == nil {
			return part, false, 0, fmt.Errorf("heraldcdc: commit outside a transaction")
		}
		part, d.cur = *d.cur, nil
		part.Commit, part.End = m.CommitLSN, m.TransactionEndLSN
		return part, true, 0, nil
	}
	return part, false, 0, nil
}

// add reads an inserted row of the outbox table into the current part.
func (d *decoder) add(rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData) {
	env, bad := envelope(rel, tuple)
	switch {
	case polled(rel, tuple):
		d.cur.Polled = append(d.cur.Polled, env.ID)
		d.cur.size += stringOverhead + len(env.ID)
	case bad != nil:
		// A row that cannot be read is not the stream's failure: it
		// goes to the dead letters, saying why, and the stream goes on.
		f := herald.Failure{ID: env.ID, Outcome: herald.OutcomeDead, Error: bad.Error()}
		d.cur.Unreadable = append(d.cur.Unreadable, f)
		d.cur.size += failureOverhead + len(f.ID) + len(f.Error)
	default:
		d.cur.Events = append(d.cur.Events, env)
		d.cur.size += envelopeSize(&env)
	}
}

// What a part's rows cost in memory beyond their strings' and payloads'
// bytes, roughly (measured on 64-bit platforms, a little above): an
// Envelope is 216 bytes, in a slice that append grows by up to a half
// again, its strings' allocations rounded up; a map of headers is about
// 350 bytes before its first entry. partOverhead is a part's own, so that
// many empty transactions (pgoutput before PostgreSQL 15 sends every
// transaction, even one without a change of the publication) are bounded
// too.
const (
	envelopeOverhead = 300
	headersOverhead  = 350
	headerOverhead   = 40
	failureOverhead  = 96
	stringOverhead   = 32
	partOverhead     = 512
)

// envelopeSize is what an event read from the stream holds in memory,
// roughly.
func envelopeSize(env *herald.Envelope) int {
	n := envelopeOverhead + len(env.ID) + len(env.Topic) + len(env.Key) + len(env.Type) + len(env.AggregateType) +
		len(env.AggregateID) + len(env.Payload)
	if len(env.Headers) > 0 {
		n += headersOverhead
	}
	for k, v := range env.Headers {
		n += headerOverhead + len(k) + len(v)
	}
	return n
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
