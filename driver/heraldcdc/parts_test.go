package heraldcdc

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// pgoutput builds pgoutput messages (protocol version 1) for the decoder.
type pgoutput struct{ b []byte }

func msg(kind byte) *pgoutput { return &pgoutput{b: []byte{kind}} }

func (m *pgoutput) u8(v byte) *pgoutput { m.b = append(m.b, v); return m }
func (m *pgoutput) u16(v int) *pgoutput {
	m.b = binary.BigEndian.AppendUint16(m.b, uint16(v))
	return m
}
func (m *pgoutput) u32(v int) *pgoutput {
	m.b = binary.BigEndian.AppendUint32(m.b, uint32(v))
	return m
}
func (m *pgoutput) u64(v uint64) *pgoutput { m.b = binary.BigEndian.AppendUint64(m.b, v); return m }
func (m *pgoutput) str(s string) *pgoutput { m.b = append(append(m.b, s...), 0); return m }

// pgTime is a timestamp as pgoutput sends it: microseconds since 2000.
func pgTime(t time.Time) uint64 {
	return uint64(t.Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds())
}

var outboxColumns = []string{"id", "topic", "key", "payload", "headers", "state", "created_at"}

func relationMsg() []byte {
	m := msg('R').u32(7).str("public").str("herald_outbox").u8('d').u16(len(outboxColumns))
	for _, c := range outboxColumns {
		m.u8(0).str(c).u32(25).u32(0xffffffff)
	}
	return m.b
}

func beginMsg(final pglogrepl.LSN, at time.Time) []byte {
	return msg('B').u64(uint64(final)).u64(pgTime(at)).u32(42).b
}

func commitMsg(commit, end pglogrepl.LSN, at time.Time) []byte {
	return msg('C').u8(0).u64(uint64(commit)).u64(uint64(end)).u64(pgTime(at)).b
}

// insertMsg is a row of the outbox table; state and headers as given.
func insertMsg(id, payload, headers, state string) []byte {
	vals := []string{id, "orders", "k", `\x` + fmt.Sprintf("%x", payload), headers, state, "2026-01-02 03:04:05.123456+00"}
	m := msg('I').u32(7).u8('N').u16(len(vals))
	for _, v := range vals {
		m.u8('t').u32(len(v))
		m.b = append(m.b, v...)
	}
	return m.b
}

func heartbeatMsg(lsn pglogrepl.LSN) []byte {
	m := msg('M').u8(0).u64(uint64(lsn)).str(heartbeatPrefix).u32(len("herald_outbox"))
	m.b = append(m.b, "herald_outbox"...)
	return m.b
}

// feed decodes messages and returns the parts handed out and the
// heartbeats' positions.
func feed(t *testing.T, d *decoder, msgs ...[]byte) (parts []Transaction, beats []pglogrepl.LSN) {
	t.Helper()
	for _, m := range msgs {
		part, ready, beat, err := d.decode(m)
		require.NoError(t, err)
		if ready {
			parts = append(parts, part)
		}
		if beat != 0 {
			beats = append(beats, beat)
		}
	}
	return parts, beats
}

func newDecoder(rows, bytes int) *decoder {
	return &decoder{relations: map[uint32]*pglogrepl.RelationMessage{}, schema: "public", table: "herald_outbox", slot: "herald_outbox",
		partRows: rows, partBytes: bytes}
}

// A transaction comes in parts of PartRows rows (events, unreadable and
// polled alike), each with the commit's position and time from BEGIN,
// numbered; only the last, at COMMIT, has the end. A heartbeat is only
// ever taken between transactions.
func TestDecoderHandsOutATransactionInPartsOfRows(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := newDecoder(3, 1<<20)
	parts, beats := feed(t, d,
		relationMsg(),
		beginMsg(0x500, at),
		insertMsg("e1", "p1", "{}", "streamed"),
		insertMsg("r1", "p", "{}", "ready"),
		insertMsg("bad", "p", `{"n": 1}`, "streamed"),
		heartbeatMsg(0x450), // never inside a transaction
		insertMsg("e2", "p2", "{}", "streamed"),
		insertMsg("e3", "p3", `{"a":"b"}`, "streamed"),
		insertMsg("e4", "p4", "{}", "streamed"),
		insertMsg("e5", "p5", "{}", "streamed"),
		commitMsg(0x500, 0x510, at),
		heartbeatMsg(0x520),
		beginMsg(0x600, at),
		commitMsg(0x600, 0x610, at),
	)
	require.Equal(t, []pglogrepl.LSN{0x520}, beats)
	require.Len(t, parts, 4)
	var got [][]string
	for i, p := range parts[:3] {
		require.Equal(t, i, p.Part)
		require.Equal(t, pglogrepl.LSN(0x500), p.Commit)
		require.True(t, at.Equal(p.CommitTime))
		var ids []string
		for _, e := range p.Events {
			ids = append(ids, e.ID)
		}
		for _, f := range p.Unreadable {
			ids = append(ids, "unreadable:"+f.ID)
		}
		for _, id := range p.Polled {
			ids = append(ids, "polled:"+id)
		}
		got = append(got, ids)
		if i < 2 {
			require.Zero(t, p.End, "more parts follow")
		}
	}
	require.Equal(t, [][]string{{"e1", "bad", "polled:r1"}, {"e2", "e3", "e4"}, {"e5"}}, got)
	var marker []string // an unreadable row is an event the relay refuses, in its place
	for name := range parts[0].Events[1].Headers {
		if strings.HasPrefix(name, herald.UnreadableHeader+"row: ") {
			marker = append(marker, name)
		}
	}
	require.Equal(t, []string{herald.UnreadableHeader + "row: " + `column headers: header "n" is a number, not a string`}, marker)
	require.Equal(t, pglogrepl.LSN(0x510), parts[2].End)
	require.Equal(t, []byte("p5"), parts[2].Events[0].Payload)
	require.Equal(t, map[string]string{"a": "b"}, parts[1].Events[1].Headers)
	// A transaction without rows is one part, its last.
	require.Equal(t, Transaction{Commit: 0x600, End: 0x610, CommitTime: parts[3].CommitTime, size: partOverhead}, parts[3])

	// A part ending at a transaction's last row leaves an empty last part.
	parts, _ = feed(t, newDecoder(2, 1<<20), relationMsg(), beginMsg(0x700, at),
		insertMsg("a", "1", "{}", "streamed"), insertMsg("b", "2", "{}", "streamed"), commitMsg(0x700, 0x710, at))
	require.Len(t, parts, 2)
	require.Len(t, parts[0].Events, 2)
	require.Zero(t, parts[0].End)
	require.Empty(t, parts[1].Events)
	require.Equal(t, 1, parts[1].Part)
	require.Equal(t, pglogrepl.LSN(0x710), parts[1].End)
}

// A part ends at the row that brings it to PartBytes: rows of 1,000-byte
// payloads come two by two under a bound of 3,000 bytes.
func TestDecoderCutsPartsByBytes(t *testing.T) {
	t.Parallel()
	at := time.Now()
	payload := strings.Repeat("x", 1000)
	msgs := [][]byte{relationMsg(), beginMsg(0x500, at)}
	for i := range 5 {
		msgs = append(msgs, insertMsg(fmt.Sprint(i), payload, "{}", "streamed"))
	}
	parts, _ := feed(t, newDecoder(1000, 3000), append(msgs, commitMsg(0x500, 0x510, at))...)
	var sizes []int
	for _, p := range parts {
		sizes = append(sizes, len(p.Events))
		if p.End == 0 {
			require.GreaterOrEqual(t, p.size, 3000)
			require.Less(t, p.size-envelopeSize(&p.Events[len(p.Events)-1]), 3000, "cut at the row that reached the bound")
		}
	}
	require.Equal(t, []int{2, 2, 1}, sizes)
}

// cut's rule: whole transactions as long as they fit; the first one
// waited for until it is whole or fills a batch; a later one taken only
// whole and only if it fits.
func TestCutKeepsTransactionsWholeUnlessOneAloneExceedsTheLimit(t *testing.T) {
	t.Parallel()
	whole := func(rows int) span { return span{rows: rows, last: true} }
	partial := func(rows int) span { return span{rows: rows} }
	for _, c := range []struct {
		name string
		held []span
		n    int
		more bool
	}{
		{"NothingHeldWaits", nil, 0, true},
		{"AFirstTransactionThatMayStillFitIsWaitedFor", []span{partial(5)}, 0, true},
		{"AFirstTransactionOfLimitRowsFillsABatch", []span{partial(10)}, 10, false},
		{"ALargerOneIsSplit", []span{whole(25)}, 10, false},
		{"AWholeOneLooksForMore", []span{whole(4)}, 4, true},
		{"WholeOnesThatFitGoTogether", []span{whole(4), whole(5)}, 9, true},
		{"ExactlyFull", []span{whole(4), whole(6)}, 10, false},
		{"OneThatDoesNotFitWaitsForTheNextBatch", []span{whole(4), whole(7)}, 4, false},
		{"OneStillComingThatMayFitIsLookedFor", []span{whole(4), partial(3)}, 4, true},
		{"OneStillComingThatCannotFitIsNot", []span{whole(4), partial(7)}, 4, false},
		{"AfterOneStillComingNothingIsTaken", []span{whole(4), partial(1), whole(1)}, 4, true},
		{"TheRestOfASplitOneTakesWholeOnesAfterIt", []span{whole(3), whole(2), partial(9)}, 5, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n, more := cut(c.held, 10, 1<<30, 10)
			require.Equal(t, c.n, n, "rows")
			require.Equal(t, c.more, more, "more")
		})
	}
}

func TestConfigSizes(t *testing.T) {
	t.Parallel()
	c, err := Config{ConnString: "x"}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, 16<<20, c.BufferBytes)
	require.Equal(t, 1000, c.PartRows)
	require.Equal(t, 4<<20, c.PartBytes)
	c, err = Config{ConnString: "x", BufferBytes: 1 << 20}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, 1<<20, c.PartBytes, "a part is at most the buffer")
	_, err = Config{ConnString: "x", BufferBytes: -1}.withDefaults()
	require.ErrorContains(t, err, "Config.BufferBytes")
	_, err = Config{ConnString: "x", PartRows: -1}.withDefaults()
	require.ErrorContains(t, err, "Config.PartRows")
	_, err = Config{ConnString: "x", BufferBytes: 1 << 20, PartBytes: 2 << 20}.withDefaults()
	require.ErrorContains(t, err, "Config.PartBytes 2097152 must not exceed Config.BufferBytes 1048576")
}

// cut's byte bound: transactions join a batch while their rows' memory
// fits in maxBytes; a first one that reaches it alone goes out as the
// rows of it that fit (fit), at least one.
func TestCutKeepsABatchWithinItsBytes(t *testing.T) {
	t.Parallel()
	whole := func(rows, bytes int) span { return span{rows: rows, bytes: bytes, last: true} }
	for _, c := range []struct {
		name string
		held []span
		fit  int
		n    int
		more bool
	}{
		{"OneThatWouldPassTheBytesWaits", []span{whole(3, 60), whole(2, 50)}, 3, 3, false},
		{"ExactlyTheBytes", []span{whole(2, 40), whole(3, 60)}, 2, 5, false},
		{"RoomLeftLooksForMore", []span{whole(2, 40)}, 2, 2, true},
		{"AFirstOneOverTheBytesGoesOutAsTheRowsThatFit", []span{whole(4, 130)}, 3, 3, false},
		{"AFirstOneStillComingOverTheBytesToo", []span{{rows: 2, bytes: 120}}, 1, 1, false},
		{"ARowLargerThanTheBytesGoesAlone", []span{whole(1, 500), whole(1, 10)}, 1, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n, more := cut(c.held, 10, 100, c.fit)
			require.Equal(t, c.n, n, "rows")
			require.Equal(t, c.more, more, "more")
		})
	}
}

// fit counts the first transaction's rows, across its parts, from the
// first not handed out, while their memory stays within the bound.
func TestFitCountsTheFirstTransactionsRowsWithinTheBytes(t *testing.T) {
	t.Parallel()
	events := func(n int) []herald.Envelope {
		out := make([]herald.Envelope, n)
		for i := range out {
			out[i].Payload = make([]byte, 1000-envelopeOverhead) // envelopeSize 1000
		}
		return out
	}
	first, second := Txn{s: &txnState{}}, Txn{s: &txnState{}}
	s := &Source{held: []piece{
		{tx: Transaction{Events: events(3)}, txn: first, ev: 1}, // one handed out already
		{tx: Transaction{Events: events(2), Unreadable: []herald.Failure{{ID: "x"}}}, txn: first},
		{tx: Transaction{Events: events(5)}, txn: second},
	}}
	require.Equal(t, 2, s.fit(2500))
	require.Equal(t, 1, s.fit(500), "at least one")
	require.Equal(t, 4, s.fit(4000), "not the unreadable row past the bound")
	require.Equal(t, 5, s.fit(1<<20), "only the first transaction's")
}

// A piece's bytes not handed out (left, what spans sums) follow hand row
// by row, events then unreadable rows, and match counting them anew.
func TestHandKeepsThePiecesBytesLeft(t *testing.T) {
	t.Parallel()
	events := make([]herald.Envelope, 3)
	for i := range events {
		events[i].Payload = make([]byte, 100*(i+1))
	}
	txn := Txn{s: &txnState{}}
	p := piece{tx: Transaction{Events: events, Unreadable: []herald.Failure{{ID: "x", Error: "bad"}}}, txn: txn, last: true}
	p.left = p.bytes(p.rows())
	s := &Source{held: []piece{p}, heldRows: 4}
	for _, n := range []int{2, 1, 1} {
		before := s.spans()[0].bytes
		s.hand(nil, n)
		if len(s.held) == 0 {
			break
		}
		h := &s.held[0]
		require.Equal(t, h.bytes(h.rows()), h.left, "after handing %d rows", n)
		require.Less(t, h.left, before)
	}
	require.Empty(t, s.held, "every row handed out")
}
