package heraldpg

import (
	"context"
	"database/sql"
	"encoding/json"

	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// NewWriter returns a writer that joins a caller's pgx transaction:
//
//	err := w.WriteTx(ctx, tx, herald.Message{Topic: "orders", Payload: body})
func NewWriter(cfg *Config) (*herald.Writer[pgx.Tx], error) {
	ins, err := newInserter(cfg)
	if err != nil {
		return nil, err
	}
	return herald.NewWriter[pgx.Tx](pgxInserter{ins}, writerConfig(cfg))
}

// NewSQLWriter returns a writer that joins a caller's database/sql
// transaction on a pgx stdlib connection (driver name "pgx").
func NewSQLWriter(cfg *Config) (*herald.Writer[*sql.Tx], error) {
	ins, err := newInserter(cfg)
	if err != nil {
		return nil, err
	}
	return herald.NewWriter[*sql.Tx](sqlInserter{ins}, writerConfig(cfg))
}

func writerConfig(cfg *Config) *herald.WriterConfig {
	if cfg == nil {
		return nil
	}
	return &herald.WriterConfig{MaxPayloadBytes: cfg.MaxPayloadBytes}
}

// inserter holds a writer's statements: the insert of one message and of
// many, with Config.EmitMessages the statements that emit them as logical
// decoding messages instead (emitOneSQL, whose argument is the events as
// JSON; empty otherwise), and with Config.DeleteAfterInsert the deletes
// that follow the inserts (empty otherwise).
type inserter struct {
	one, many, delOne, delMany string
	emitOne, emitMany          string
}

func newInserter(cfg *Config) (inserter, error) {
	n, err := cfg.names()
	if err != nil {
		return inserter{}, err
	}
	q := newQueries(n)
	in := inserter{one: q.insertOne, many: q.insertMany}
	switch {
	case cfg != nil && cfg.EmitMessages:
		in.emitOne, in.emitMany = q.emitOne, q.emitMany
	case cfg != nil && cfg.DeleteAfterInsert:
		in.delOne, in.delMany = q.deleteOne, q.deleteMany
	}
	return in, nil
}

// deletion returns the statement that deletes the rows statement inserted
// for msgs, whose ids herald.Prepare has set, or "" when the writer keeps
// its rows.
func (in inserter) deletion(msgs []herald.Message) (string, []any) {
	if in.delOne == "" {
		return "", nil
	}
	if len(msgs) == 1 {
		return in.delOne, []any{msgs[0].ID}
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return in.delMany, []any{uuidArray(ids)}
}

// execTx writes msgs through x, a database/sql transaction or what stands
// for one: the emit if the writer has one, else or when it emitted nothing
// the insert, then the delete if the writer has one (database/sql sends one
// statement per call, with its arguments, so each is a round trip).
func (in inserter) execTx(ctx context.Context, x Execer, msgs []herald.Message) error {
	emitted, err := in.emit(msgs, func(q string, args []any) (int64, error) {
		res, err := x.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("the driver does not count the rows of a SELECT: %w", err)
		}
		return n, nil
	})
	if emitted || err != nil {
		return err
	}
	q, args, err := in.statement(msgs)
	if err != nil {
		return err
	}
	if _, err := x.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("heraldpg: writing %d events: %w", len(msgs), err)
	}
	if del, delArgs := in.deletion(msgs); del != "" {
		if _, err := x.ExecContext(ctx, del, delArgs...); err != nil {
			return fmt.Errorf("heraldpg: deleting the %d events written (Config.DeleteAfterInsert): %w", len(msgs), err)
		}
	}
	return nil
}

// emit runs the emit statement of msgs through exec, which returns the
// rows it returned, when the writer has one (Config.EmitMessages), and
// reports whether it emitted them: one row per message on a streamed
// table, none on a table whose inserts are ready (the writer then inserts
// them as rows, under the lock the statement took).
func (in inserter) emit(msgs []herald.Message, exec func(sql string, args []any) (int64, error)) (bool, error) {
	if in.emitOne == "" {
		return false, nil
	}
	q, args, err := in.emitStatement(msgs)
	if err != nil {
		return false, err
	}
	rows, err := exec(q, args)
	switch {
	case err != nil:
		return false, fmt.Errorf("heraldpg: emitting %d events: %w", len(msgs), err)
	case rows == int64(len(msgs)):
		return true, nil
	case rows == 0:
		return false, nil
	}
	return false, fmt.Errorf("heraldpg: emitting %d events: the statement returned %d rows", len(msgs), rows)
}

// statement returns the SQL and arguments that insert msgs in one round
// trip: a plain VALUES insert for one message (the common case, cheapest to
// plan), arrays for more.
func (in inserter) statement(msgs []herald.Message) (string, []any, error) {
	if len(msgs) == 1 {
		m := msgs[0]
		h, err := encodeHeaders(m.Headers)
		if err != nil {
			return "", nil, err
		}
		return in.one, []any{m.ID, m.Topic, m.Key, m.Type, m.AggregateType, m.AggregateID,
			payload(m.Payload), h, availableAt(m.AvailableAt), eventVersion(m.EventVersion), aggregateVersion(m.AggregateVersion)}, nil
	}
	var (
		ids, topics, keys, types, aggTypes, aggIDs, headers = make([]string, len(msgs)), make([]string, len(msgs)),
			make([]string, len(msgs)), make([]string, len(msgs)), make([]string, len(msgs)), make([]string, len(msgs)),
			make([]string, len(msgs))
		payloads = make([][]byte, len(msgs))
		avail    = make([]*time.Time, len(msgs))
		versions = make([]int32, len(msgs))
		aggVers  = make([]*int64, len(msgs))
	)
	for i, m := range msgs {
		h, err := encodeHeaders(m.Headers)
		if err != nil {
			return "", nil, err
		}
		ids[i], topics[i], keys[i], types[i], aggTypes[i], aggIDs[i], headers[i] =
			m.ID, m.Topic, m.Key, m.Type, m.AggregateType, m.AggregateID, h
		payloads[i], avail[i] = payload(m.Payload), availableAt(m.AvailableAt)
		versions[i], aggVers[i] = eventVersion(m.EventVersion), aggregateVersion(m.AggregateVersion)
	}
	return in.many, []any{uuidArray(ids), topics, keys, types, aggTypes, aggIDs, payloads, headers, avail, versions, aggVers}, nil
}

// emitBody is the content of an event's logical decoding message
// (Config.EmitMessages) as the writer encodes it: the README's fields, but
// for the seq and created_at that emitOneSQL puts in front; none whose
// value is the column's default.
type emitBody struct {
	ID               string            `json:"id"`
	Topic            string            `json:"topic"`
	Key              string            `json:"key,omitempty"`
	Type             string            `json:"type,omitempty"`
	AggregateType    string            `json:"aggregate_type,omitempty"`
	AggregateID      string            `json:"aggregate_id,omitempty"`
	Payload          []byte            `json:"payload"` // base64
	Headers          map[string]string `json:"headers,omitempty"`
	EventVersion     int32             `json:"event_version,omitempty"` // omitted when 1
	AggregateVersion int64             `json:"aggregate_version,omitempty"`
	AvailableAt      *time.Time        `json:"available_at,omitempty"`
}

// emitStatement returns the statement that emits msgs, validated by
// herald.Prepare (valid UTF-8 and no NUL in every string, so JSON carries
// them unchanged), with the events as JSON: one for one message, an
// array for more.
func (in inserter) emitStatement(msgs []herald.Message) (string, []any, error) {
	bodies := make([]string, len(msgs))
	for i, m := range msgs {
		b := emitBody{ID: m.ID, Topic: m.Topic, Key: m.Key, Type: m.Type, AggregateType: m.AggregateType,
			AggregateID: m.AggregateID, Payload: payload(m.Payload), Headers: m.Headers,
			AggregateVersion: max(m.AggregateVersion, 0), AvailableAt: availableAt(m.AvailableAt)}
		if v := eventVersion(m.EventVersion); v != 1 {
			b.EventVersion = v
		}
		enc, err := json.Marshal(b)
		if err != nil {
			return "", nil, fmt.Errorf("heraldpg: encoding event %s: %w", m.ID, err)
		}
		bodies[i] = string(enc)
	}
	if len(msgs) == 1 {
		return in.emitOne, []any{bodies[0]}, nil
	}
	return in.emitMany, []any{bodies}, nil
}

// eventVersion is the event_version column's value: 1 for a message that
// did not go through herald.Prepare without one (Prepare refuses what the
// column cannot hold).
func eventVersion(v int) int32 {
	if v <= 0 || v > herald.MaxEventVersion {
		return 1
	}
	return int32(v)
}

// aggregateVersion is the aggregate_version column's value: NULL for none.
func aggregateVersion(v int64) *int64 {
	if v <= 0 {
		return nil
	}
	return &v
}

// payload keeps an empty payload from becoming NULL.
func payload(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

func availableAt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func encodeHeaders(h map[string]string) (string, error) {
	enc, err := sqlstore.EncodeHeaders(h)
	if err != nil {
		return "", fmt.Errorf("heraldpg: %w", err)
	}
	return enc, nil
}

type pgxInserter struct{ inserter }

func (p pgxInserter) InsertTx(ctx context.Context, tx pgx.Tx, msgs []herald.Message) error {
	if tx == nil {
		return fmt.Errorf("heraldpg: WriteTx: tx is nil")
	}
	emitted, err := p.emit(msgs, func(sql string, args []any) (int64, error) {
		tag, err := tx.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	})
	if emitted || err != nil {
		return err
	}
	sql, args, err := p.statement(msgs)
	if err != nil {
		return err
	}
	del, delArgs := p.deletion(msgs)
	if del == "" {
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("heraldpg: writing %d events: %w", len(msgs), err)
		}
		return nil
	}
	// The insert and its delete in one round trip. Close reads both
	// results and returns the first error.
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(del, delArgs...)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("heraldpg: writing %d events and deleting them (Config.DeleteAfterInsert): %w", len(msgs), err)
	}
	return nil
}

type sqlInserter struct{ inserter }

func (s sqlInserter) InsertTx(ctx context.Context, tx *sql.Tx, msgs []herald.Message) error {
	if tx == nil {
		return fmt.Errorf("heraldpg: WriteTx: tx is nil")
	}
	return s.execTx(ctx, tx, msgs)
}

func validUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}
