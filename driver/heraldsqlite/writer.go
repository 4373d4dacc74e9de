package heraldsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/herald-outbox/herald"
)

// maxRowsPerInsert keeps one INSERT under SQLite's limit of 32766 bound
// variables (9 a row).
const maxRowsPerInsert = 3000

// NewWriter returns a writer that joins a caller's *sql.Tx on a database
// from Open.
func NewWriter(cfg *Config) (*herald.Writer[*sql.Tx], error) {
	table, err := cfg.table()
	if err != nil {
		return nil, err
	}
	var wcfg *herald.WriterConfig
	if cfg != nil {
		wcfg = &herald.WriterConfig{MaxPayloadBytes: cfg.MaxPayloadBytes}
	}
	return herald.NewWriter[*sql.Tx](inserter{
		prefix: render(table, insertPrefixSQL),
		tuple:  render(table, insertTupleSQL),
	}, wcfg)
}

type inserter struct{ prefix, tuple string }

// InsertTx writes msgs with one multi-row INSERT (one per 3000 messages).
func (in inserter) InsertTx(ctx context.Context, tx *sql.Tx, msgs []herald.Message) error {
	if tx == nil {
		return errors.New("heraldsqlite: WriteTx: tx is nil")
	}
	for len(msgs) > 0 {
		chunk := msgs[:min(len(msgs), maxRowsPerInsert)]
		msgs = msgs[len(chunk):]
		var b strings.Builder
		b.WriteString(in.prefix)
		args := make([]any, 0, 9*len(chunk))
		for i, m := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(in.tuple)
			headers := "{}"
			if len(m.Headers) > 0 {
				h, err := json.Marshal(m.Headers)
				if err != nil {
					return fmt.Errorf("heraldsqlite: encoding headers: %w", err)
				}
				headers = string(h)
			}
			payload := m.Payload
			if payload == nil {
				payload = []byte{}
			}
			var avail any
			if !m.AvailableAt.IsZero() {
				avail = m.AvailableAt.UnixMicro()
			}
			args = append(args, m.ID, m.Topic, m.Key, m.Type, m.AggregateType, m.AggregateID, payload, headers, avail)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("heraldsqlite: writing %d events: %w", len(chunk), err)
		}
	}
	return nil
}
