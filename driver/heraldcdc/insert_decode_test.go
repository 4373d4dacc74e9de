package heraldcdc

import (
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

// insertWithKinds is an insert message of relation 7 whose columns are of
// the kinds given: text and binary columns carry vals in turn.
func insertWithKinds(kinds string, vals ...string) []byte {
	m := msg('I').u32(7).u8('N').u16(len(kinds))
	for _, k := range []byte(kinds) {
		m.u8(k)
		if k == 't' || k == 'b' {
			v := vals[0]
			vals = vals[1:]
			m.u32(len(v))
			m.b = append(m.b, v...)
		}
	}
	return m.b
}

// readInsert reads an insert message with the decoder's in-place reader
// and returns its columns, copied, or the error.
func readInsert(wal []byte) ([]pglogrepl.TupleDataColumn, error) {
	d := newDecoder(1000, 1<<20)
	d.relations[7] = &pglogrepl.RelationMessage{RelationID: 7, Namespace: "other", RelationName: "table"}
	d.cur = &Transaction{}
	if _, _, _, err := d.decode(wal); err != nil {
		return nil, err
	}
	out := make([]pglogrepl.TupleDataColumn, len(d.cols))
	for i, c := range d.cols {
		out[i] = pglogrepl.TupleDataColumn{DataType: c.kind, Length: uint32(len(c.data)), Data: append([]byte(nil), c.data...)}
		if c.data == nil {
			out[i].Data = nil
		}
	}
	return out, nil
}

// The decoder reads insert messages in place, without pglogrepl: where
// pglogrepl reads a message, the decoder reads the same columns, and a
// message cut anywhere is an error, never a panic or a shorter row.
func TestInsertsAreReadAsPglogreplReadsThem(t *testing.T) {
	t.Parallel()
	full := insertWithKinds("tnubt", "a5f0", "\x00\x01\xff", `{"a":"b"}`)
	for _, wal := range [][]byte{
		full,
		insertWithKinds("t", ""),
		insertWithKinds("nnn"),
	} {
		got, err := readInsert(wal)
		require.NoError(t, err)
		requireAsPglogrepl(t, wal, got)
	}
	for cut := 1; cut < len(full); cut++ {
		_, err := readInsert(full[:cut])
		require.Error(t, err, "the message cut at %d of %d bytes", cut, len(full))
	}
	_, err := readInsert(insertWithKinds(""))
	require.ErrorContains(t, err, "too short", "a row of no column")
	notNew := insertWithKinds("t", "x")
	notNew[5] = 'O'
	_, err = readInsert(notNew)
	require.ErrorContains(t, err, "not 'N'")
	_, err = readInsert(insertWithKinds("x"))
	require.ErrorContains(t, err, "unknown column kind")
}

func requireAsPglogrepl(t *testing.T, wal []byte, got []pglogrepl.TupleDataColumn) {
	t.Helper()
	m, err := pglogrepl.Parse(wal)
	require.NoError(t, err)
	ins, ok := m.(*pglogrepl.InsertMessage)
	require.True(t, ok, "%T", m)
	require.Len(t, got, len(ins.Tuple.Columns))
	for i, c := range ins.Tuple.Columns {
		require.Equal(t, c.DataType, got[i].DataType, "column %d", i)
		require.Equal(t, string(c.Data), string(got[i].Data), "column %d", i)
	}
}

func FuzzInsertsAreReadAsPglogreplReadsThem(f *testing.F) {
	f.Add(insertWithKinds("tnubt", "a5f0", "\x00\x01\xff", `{"a":"b"}`))
	f.Add(insertWithKinds(""))
	f.Add([]byte("I\x00\x00\x00\x07N\x00\x01t\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, wal []byte) {
		if len(wal) == 0 || wal[0] != 'I' {
			return
		}
		got, err := readInsert(wal)
		if err != nil {
			return
		}
		// What the decoder read, pglogrepl reads the same way (it
		// ignores what follows the row; the decoder does too).
		requireAsPglogrepl(t, wal, got)
	})
}
