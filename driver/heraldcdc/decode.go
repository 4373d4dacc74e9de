package heraldcdc

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
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
//
// Besides the table's inserted rows, a transaction carries the events a
// producer wrote as transactional logical decoding messages (heraldpg's
// Config.EmitMessages): pgoutput sends those, when asked (messages
// 'true'), in their place among the transaction's changes, and only once
// it committed, like its rows. Their prefix names the table (eventPrefix).
type decoder struct {
	relations           map[uint32]*pglogrepl.RelationMessage
	schema, table       string
	slot                string
	partRows, partBytes int
	cur                 *Transaction // the part being filled, between Begin and Commit

	prefix  string        // eventPrefix(schema, table), once made
	logger  *slog.Logger  // for the messages that are no events; nil: slog.Default()
	skipped *atomic.Int64 // counts them; may be nil

	cols []column // the columns of the insert being read, reused
}

// column is one value of an inserted row, read in place: data points
// into the message, which the connection reuses for the next one, so
// whatever is kept of it is copied (a string, a decoded payload).
type column struct {
	kind byte // pglogrepl.TupleDataType*: text, binary, null or unchanged TOAST
	data []byte
}

// decode reads one message; ready is true with a part to hand out: one
// that reached the part size, or a transaction's last at its commit.
// heartbeat is the position of one of the stream's heartbeat messages (see
// Config.HeartbeatInterval), zero otherwise.
func (d *decoder) decode(wal []byte) (part Transaction, ready bool, heartbeat pglogrepl.LSN, err error) {
	if len(wal) > 0 && pglogrepl.MessageType(wal[0]) == pglogrepl.MessageTypeInsert {
		return d.decodeInsert(wal)
	}
	msg, err := pglogrepl.Parse(wal)
	if err != nil {
		return part, false, 0, fmt.Errorf("heraldcdc: decoding pgoutput: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.LogicalDecodingMessage:
		// A heartbeat is a non-transactional message, decoded at its own
		// place in the WAL, between transactions; one of another program
		// (another prefix) or another slot's stream is no concern of this
		// one, nor is an event message of another outbox.
		switch {
		case d.cur == nil && !m.Transactional && m.Prefix == heartbeatPrefix && string(m.Content) == d.slot:
			return part, false, m.LSN, nil
		case m.Prefix != d.eventPrefix():
		case !m.Transactional || d.cur == nil:
			// Decoded as it was written, whether its transaction commits or
			// not: not an event of any transaction.
			d.skip(m, errors.New("not transactional (pg_logical_emit_message's first argument must be true)"))
		default:
			d.addMessage(m)
			if part, ok := d.split(); ok {
				return part, true, 0, nil
			}
		}
	case *pglogrepl.RelationMessage:
		d.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		d.cur = &Transaction{Commit: m.FinalLSN, CommitTime: m.CommitTime, size: partOverhead}
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

// decodeInsert reads an insert message (pgoutput without the streaming
// option: 'I', the relation's id, 'N' and the new row's columns, each a
// kind byte and, for a text or binary value, its length and bytes) in
// place, without pglogrepl's copy of every column: the stream's most
// frequent message, a score of columns each.
func (d *decoder) decodeInsert(wal []byte) (part Transaction, ready bool, heartbeat pglogrepl.LSN, err error) {
	bad := func(what string) (Transaction, bool, pglogrepl.LSN, error) {
		return part, false, 0, fmt.Errorf("heraldcdc: decoding pgoutput: insert message of %d bytes: %s", len(wal), what)
	}
	if len(wal) < 9 { // a row has a column
		return bad("too short")
	}
	relID := binary.BigEndian.Uint32(wal[1:])
	if wal[5] != 'N' {
		return bad(fmt.Sprintf("tuple marked %q, not 'N'", wal[5]))
	}
	n := int(binary.BigEndian.Uint16(wal[6:]))
	cols, at := d.cols[:0], 8
	for range n {
		if at >= len(wal) {
			return bad("ends within its columns")
		}
		c := column{kind: wal[at]}
		at++
		switch c.kind {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if at+4 > len(wal) {
				return bad("ends within a column's length")
			}
			size := int(binary.BigEndian.Uint32(wal[at:]))
			at += 4
			if size < 0 || size > len(wal)-at {
				return bad("a column's length exceeds the message")
			}
			c.data = wal[at : at+size : at+size]
			at += size
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		default:
			return bad(fmt.Sprintf("unknown column kind %q", c.kind))
		}
		cols = append(cols, c)
	}
	d.cols = cols
	rel, ok := d.relations[relID]
	switch {
	case !ok:
		return part, false, 0, fmt.Errorf("heraldcdc: insert into relation %d, which was never described", relID)
	case d.cur == nil:
		return part, false, 0, fmt.Errorf("heraldcdc: insert outside a transaction")
	case rel.Namespace != d.schema || rel.RelationName != d.table:
		return part, false, 0, nil // another table of the publication
	}
	d.add(rel, cols)
	if part, ok := d.split(); ok {
		return part, true, 0, nil
	}
	return part, false, 0, nil
}

// split hands out the current part once it reached the part size, and
// starts the next part of its transaction.
func (d *decoder) split() (Transaction, bool) {
	if d.cur.rows() < d.partRows && d.cur.size < d.partBytes {
		return Transaction{}, false
	}
	part := *d.cur
	d.cur = &Transaction{Commit: part.Commit, CommitTime: part.CommitTime, Part: part.Part + 1, size: partOverhead}
	return part, true
}

// add reads an inserted row of the outbox table into the current part.
func (d *decoder) add(rel *pglogrepl.RelationMessage, cols []column) {
	env, bad := envelope(rel, cols)
	switch {
	case polled(rel, cols):
		d.cur.Polled = append(d.cur.Polled, env.ID)
		d.cur.size += stringOverhead + len(env.ID)
	case bad != nil && env.ID != "" && env.Topic != "":
		// A row that cannot be read is not the stream's failure: it is
		// an event the relay refuses (herald.MarkUnreadable), so that it goes
		// to the dead letters saying why and, ordered, parks its key
		// with the key's later events held behind it, as a claim of the
		// row would. Return marks its row dead, or, when the producer
		// deleted it (Config.DeleteAfterInsert), writes it again with
		// its fields as read.
		herald.MarkUnreadable(&env, "row: "+bad.Error())
		d.cur.Events = append(d.cur.Events, env)
		d.cur.size += envelopeSize(&env)
	case bad != nil:
		// Not even an event to name: written into its row, if any.
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
func polled(rel *pglogrepl.RelationMessage, cols []column) bool {
	for i, c := range rel.Columns {
		if c.Name == "state" && i < len(cols) {
			col := cols[i]
			return col.kind == pglogrepl.TupleDataTypeText && string(col.data) != streamedState
		}
	}
	return false
}

// envelope reads an inserted outbox row. Values are in text format: the
// replication connection fixes DateStyle ISO, TimeZone UTC and hex bytea.
func envelope(rel *pglogrepl.RelationMessage, cols []column) (herald.Envelope, error) {
	var env herald.Envelope
	if len(cols) != len(rel.Columns) {
		return env, fmt.Errorf("the row's columns do not match the table's")
	}
	var problem error
	for i := range cols {
		col := &cols[i]
		if col.kind != pglogrepl.TupleDataTypeText {
			continue // NULL, or an unchanged TOAST value (never in an insert)
		}
		// Each value is made a string only where a field takes it: a row
		// has a score of columns, most of them the relay's own.
		var err error
		switch rel.Columns[i].Name {
		case "id":
			env.ID = string(col.data)
		case "seq":
			env.Seq, err = strconv.ParseInt(string(col.data), 10, 64)
		case "topic":
			env.Topic = string(col.data)
		case "key":
			env.Key = string(col.data)
		case "type":
			env.Type = string(col.data)
		case "aggregate_type":
			env.AggregateType = string(col.data)
		case "aggregate_id":
			env.AggregateID = string(col.data)
		case "event_version":
			env.EventVersion, err = strconv.Atoi(string(col.data))
		case "aggregate_version": // NULL, none, is skipped above
			env.AggregateVersion, err = strconv.ParseInt(string(col.data), 10, 64)
		case "payload":
			env.Payload, err = decodeBytea(col.data)
		case "headers":
			env.Headers, err = sqlstore.DecodeHeaders(col.data)
		case "created_at":
			env.CreatedAt, err = time.Parse("2006-01-02 15:04:05.999999Z07", string(col.data))
		case "available_at":
			env.AvailableAt, err = time.Parse("2006-01-02 15:04:05.999999Z07", string(col.data))
		case "attempts":
			env.Attempt, err = strconv.Atoi(string(col.data))
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

// decodeBytea reads a bytea in the hex output format (\x and two hex
// digits a byte), which the replication connection sets.
func decodeBytea(text []byte) ([]byte, error) {
	text = bytes.TrimPrefix(text, []byte(`\x`))
	out := make([]byte, hex.DecodedLen(len(text)))
	n, err := hex.Decode(out, text)
	return out[:n], err
}

// messagesOption reports whether the server's pgoutput takes the messages
// option (PostgreSQL 14 and later), from the server_version a connection
// reports: "13.4", "15.20 (Debian 15.20-0+deb12u1)", "17beta1". A version
// that cannot be read is taken as recent.
func messagesOption(serverVersion string) bool {
	end := strings.IndexFunc(serverVersion+" ", func(r rune) bool { return r < '0' || r > '9' })
	major, err := strconv.Atoi(serverVersion[:end])
	return err != nil || major >= 14
}

// eventPrefix is the prefix of the logical decoding messages that carry
// the events of the outbox table schema.table (heraldpg's
// Config.EmitMessages, which makes the same): the table's name in it keeps
// the outboxes of one database apart.
func eventPrefix(schema, table string) string { return "herald.event:" + schema + "." + table }

func (d *decoder) eventPrefix() string {
	if d.prefix == "" {
		d.prefix = eventPrefix(d.schema, d.table)
	}
	return d.prefix
}

// addMessage reads an event message of the current transaction into the
// current part, as an event in its place among the rows. It has no row,
// so no seq unless the producer drew one (heraldpg's writers do): with
// none, a write-back gives it a fresh one. A message that is not even an
// event (no id or topic) is skipped: there is nothing to write back.
func (d *decoder) addMessage(m *pglogrepl.LogicalDecodingMessage) {
	env, ok, problem := messageEnvelope(m.Content)
	if !ok {
		d.skip(m, problem)
		return
	}
	if problem != nil {
		herald.MarkUnreadable(&env, "event message: "+problem.Error())
	}
	d.cur.Events = append(d.cur.Events, env)
	d.cur.size += envelopeSize(&env)
}

// skip logs a message of the event prefix that is no event, and counts it.
// It leaves no dead letter: nothing identifies an event to write back.
func (d *decoder) skip(m *pglogrepl.LogicalDecodingMessage, why error) {
	if d.skipped != nil {
		d.skipped.Add(1)
	}
	l := d.logger
	if l == nil {
		l = slog.Default()
	}
	l.Error("change stream: skipped a logical decoding message of the outbox's prefix that is no event; it leaves no dead letter",
		"slot", d.slot, "prefix", m.Prefix, "lsn", m.LSN.String(), "transactional", m.Transactional,
		"error", herald.Scrub(why.Error()), "content", preview(m.Content))
}

// previewBytes bounds the content a log line shows of a message.
const previewBytes = 256

// preview is the start of a message's content for a log line, scrubbed of
// secrets (herald.Scrub: no NUL, valid UTF-8, no password) and cut at
// previewBytes.
func preview(content []byte) string {
	s := herald.Scrub(string(content[:min(len(content), 4*previewBytes)]))
	if len(s) <= previewBytes {
		if len(content) > 4*previewBytes {
			return s + "..."
		}
		return s
	}
	n := previewBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// messageEnvelope reads an event message's content: a JSON object of the
// envelope's fields (id, seq, topic, key, type, aggregate_type,
// aggregate_id, payload in base64, headers, event_version,
// aggregate_version, created_at, available_at), as heraldpg's writers
// emit it. ok is
// false when it has no id (a UUID) or no topic: no event can be named.
// Otherwise env holds what could be read and problem says what could
// not, if anything; strings lose their NUL bytes, which no text column
// takes. Unknown fields are ignored; a missing or null field is the
// column's default, except the payload, which is required.
func messageEnvelope(content []byte) (env herald.Envelope, ok bool, problem error) {
	env.Attempt, env.EventVersion = 1, 1
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(content, &fields); err != nil {
		return env, false, fmt.Errorf("content is not a JSON object: %w", err)
	}
	note := func(field string, err error) {
		if err != nil && problem == nil {
			problem = fmt.Errorf("%s: %w", field, err)
		}
	}
	if !utf8.Valid(content) {
		note("content", errors.New("not valid UTF-8"))
	}
	var id string
	if err := readField(fields, "id", &id); err != nil || id == "" {
		return env, false, errors.Join(errors.New("no id"), err)
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return env, false, fmt.Errorf("id %q is not a UUID: %w", id, err)
	}
	env.ID = u.String()
	for _, f := range []struct {
		name string
		v    *string
	}{{"topic", &env.Topic}, {"key", &env.Key}, {"type", &env.Type}, {"aggregate_type", &env.AggregateType},
		{"aggregate_id", &env.AggregateID}} {
		err := readField(fields, f.name, f.v)
		if f.name == "topic" && (err != nil || strings.Trim(env.Topic, "\x00") == "") {
			// Not even a topic to write a dead row under.
			return env, false, errors.Join(errors.New("no topic"), err)
		}
		note(f.name, err)
		if strings.IndexByte(*f.v, 0) >= 0 {
			note(f.name, errors.New("contains a NUL byte"))
			*f.v = strings.ReplaceAll(*f.v, "\x00", "")
		}
	}
	// A seq only orders write-backs: one that cannot be read is none.
	if readField(fields, "seq", &env.Seq) != nil || env.Seq < 0 {
		env.Seq = 0
	}
	var payload *string
	note("payload", readField(fields, "payload", &payload))
	if payload == nil {
		note("payload", errors.New("missing"))
	} else {
		env.Payload, err = base64.StdEncoding.DecodeString(*payload)
		note("payload", err)
	}
	note("headers", readHeaders(fields, &env))
	note("event_version", readField(fields, "event_version", &env.EventVersion))
	if env.EventVersion < 1 || env.EventVersion > herald.MaxEventVersion {
		note("event_version", fmt.Errorf("%d is not between 1 and %d", env.EventVersion, herald.MaxEventVersion))
		env.EventVersion = 1
	}
	note("aggregate_version", readField(fields, "aggregate_version", &env.AggregateVersion))
	if env.AggregateVersion < 0 {
		note("aggregate_version", fmt.Errorf("%d is negative", env.AggregateVersion))
		env.AggregateVersion = 0
	}
	note("created_at", readField(fields, "created_at", &env.CreatedAt))
	note("available_at", readField(fields, "available_at", &env.AvailableAt))
	return env, true, problem
}

// readField decodes fields[name] into v, leaving v as it is when the field
// is missing or null.
func readField[T any](fields map[string]json.RawMessage, name string, v *T) error {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return nil
	}
	var x T
	if err := json.Unmarshal(raw, &x); err != nil {
		return err
	}
	*v = x
	return nil
}

// readHeaders reads the headers field, an object of strings, keeping the
// entries that are strings.
func readHeaders(fields map[string]json.RawMessage, env *herald.Envelope) error {
	var raw map[string]json.RawMessage
	if err := readField(fields, "headers", &raw); err != nil {
		return errors.New("not a JSON object of strings")
	}
	var problem error
	for k, v := range raw {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			if problem == nil {
				problem = fmt.Errorf("%q is not a string", k)
			}
			continue
		}
		if strings.IndexByte(k, 0) >= 0 || strings.IndexByte(s, 0) >= 0 {
			if problem == nil {
				problem = fmt.Errorf("%q contains a NUL byte", k)
			}
			k, s = strings.ReplaceAll(k, "\x00", ""), strings.ReplaceAll(s, "\x00", "")
		}
		if env.Headers == nil {
			env.Headers = make(map[string]string, len(raw))
		}
		env.Headers[k] = s
	}
	return problem
}

// SkippedMessages counts the logical decoding messages of the outbox's
// event prefix that the stream skipped as no event (not transactional,
// or without an id or a topic), each logged as an error: they leave no
// dead letter.
func (s *Stream) SkippedMessages() int64 { return s.skipped.Load() }
