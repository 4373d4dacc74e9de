package heraldpg

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

func someIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	return ids
}

// buildArgs builds a statement's parameters as pgx does before sending
// it, the ids for a uuid[] parameter.
func buildArgs(b *pgx.ExtendedQueryBuilder, m *pgtype.Map, arg any) error {
	sd := &pgconn.StatementDescription{ParamOIDs: []uint32{pgtype.UUIDArrayOID}}
	return b.Build(m, sd, []any{arg})
}

func TestUUIDArraysGoInBinary(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	ids := someIDs(3)

	// Why: as strings, the binary attempt fails and pgx falls back to text.
	_, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, nil)
	require.Error(t, err, "pgx encodes strings into a binary uuid[] now: uuidArray is not needed")

	var b pgx.ExtendedQueryBuilder
	require.NoError(t, buildArgs(&b, m, uuidArray(ids)))
	require.Equal(t, []int16{pgtype.BinaryFormatCode}, b.ParamFormats, "sent in binary, at the first attempt")
	var back []string
	require.NoError(t, m.Scan(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, b.ParamValues[0], &back))
	require.Equal(t, ids, back, "the same ids, in their order")

	require.NoError(t, buildArgs(&b, m, uuidArray(nil)))
	require.NotNil(t, b.ParamValues[0], "no ids is an empty array, never NULL")

	// An id that does not parse leaves them all as strings: PostgreSQL
	// refuses it with its own error, as before.
	bad := append(someIDs(2), "not-a-uuid")
	require.Equal(t, bad, uuidArray(bad))
}

// BenchmarkUUIDArray weighs an acknowledgement's ids on the relay's side:
// 100 ids built into a uuid[] parameter as pgx does, given as strings (the
// failed binary attempt, then text) and through uuidArray.
func BenchmarkUUIDArray(b *testing.B) {
	ids := someIDs(100)
	for _, bc := range []struct {
		name string
		arg  func() any
	}{
		{"Strings", func() any { return ids }},
		{"UUIDs", func() any { return uuidArray(ids) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := pgtype.NewMap()
			var qb pgx.ExtendedQueryBuilder
			for b.Loop() {
				if err := buildArgs(&qb, m, bc.arg()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
