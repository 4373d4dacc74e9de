package heraldcdc

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// eventMsg is a logical decoding message of prefix, as pgoutput sends it.
func eventMsg(transactional bool, lsn pglogrepl.LSN, prefix, content string) []byte {
	var flags byte
	if transactional {
		flags = 1
	}
	m := msg('M').u8(flags).u64(uint64(lsn)).str(prefix).u32(len(content))
	m.b = append(m.b, content...)
	return m.b
}

const outboxPrefix = "herald.event:public.herald_outbox"

// Event messages are events of their transaction, in their place among
// its rows, and count toward the part size like rows.
func TestDecoderReadsEventMessagesInTheirPlace(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := newDecoder(3, 1<<20)
	m1 := `{"id":"0190a5d0-0000-7000-8000-000000000001","seq":41,"topic":"orders","key":"k","type":"order.placed",` +
		`"aggregate_type":"order","aggregate_id":"42","payload":"aGVsbG8=","headers":{"X-Tenant":"acme"},` +
		`"event_version":3,"aggregate_version":7,"created_at":"2026-01-02T03:04:05.123456+00:00",` +
		`"available_at":"2031-02-03T04:05:06.789Z"}`
	// As plain SQL may write it: no seq, key and the rest left out,
	// PostgreSQL's base64 with a line break.
	m2 := `{"id":"0190A5D000007000800000000000002A","topic":"orders","payload":"AAEC\nAw=="}`
	parts, _ := feed(t, d,
		relationMsg(),
		beginMsg(0x500, at),
		insertMsg("e1", "p1", "{}", "streamed"),
		eventMsg(true, 0x501, outboxPrefix, m1),
		insertMsg("e2", "p2", "{}", "streamed"),
		eventMsg(true, 0x502, outboxPrefix, m2),
		eventMsg(true, 0x503, "herald.event:public.other_outbox", m1), // another outbox's
		eventMsg(true, 0x504, "someone.else", "hello"),
		commitMsg(0x500, 0x510, at),
	)
	require.Len(t, parts, 2, "a part of 3 rows, then the last")
	var got []herald.Envelope
	for _, p := range parts {
		got = append(got, p.Events...)
	}
	require.Equal(t, []string{"e1", "0190a5d0-0000-7000-8000-000000000001", "e2", "0190a5d0-0000-7000-8000-00000000002a"},
		[]string{got[0].ID, got[1].ID, got[2].ID, got[3].ID})
	require.Equal(t, herald.Envelope{
		Message: herald.Message{ID: "0190a5d0-0000-7000-8000-000000000001", Topic: "orders", Key: "k", Type: "order.placed",
			AggregateType: "order", AggregateID: "42", Payload: []byte("hello"), Headers: map[string]string{"X-Tenant": "acme"},
			EventVersion: 3, AggregateVersion: 7, AvailableAt: time.Date(2031, 2, 3, 4, 5, 6, 789000000, time.UTC)},
		Seq: 41, Attempt: 1, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC),
	}, normalized(got[1]))
	require.Equal(t, herald.Envelope{
		Message: herald.Message{ID: "0190a5d0-0000-7000-8000-00000000002a", Topic: "orders", Payload: []byte{0, 1, 2, 3},
			EventVersion: 1},
		Attempt: 1,
	}, got[3], "no seq: 0, which a write-back replaces")
	require.Equal(t, pglogrepl.LSN(0x510), parts[1].End)
}

func normalized(env herald.Envelope) herald.Envelope {
	env.CreatedAt = env.CreatedAt.UTC()
	return env
}

// A message of the prefix that names no event (no id or topic, no JSON
// object) or that is not transactional is logged, with its position and
// the start of its content, scrubbed, and counted; the stream goes on.
func TestDecoderSkipsMessagesThatAreNoEvents(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var logs bytes.Buffer
	var skipped atomic.Int64
	d := newDecoder(1000, 1<<20)
	d.logger, d.skipped = slog.New(slog.NewTextHandler(&logs, nil)), &skipped
	good := `{"id":"0190a5d0-0000-7000-8000-000000000001","topic":"orders","payload":""}`
	parts, _ := feed(t, d,
		relationMsg(),
		eventMsg(false, 0x400, outboxPrefix, good), // outside a transaction, not transactional
		beginMsg(0x500, at),
		eventMsg(true, 0x501, outboxPrefix, `not json, postgres://app:hunter2@db/x`+strings.Repeat("x", 2000)),
		eventMsg(true, 0x502, outboxPrefix, `{"topic":"orders","payload":""}`),
		eventMsg(true, 0x503, outboxPrefix, `{"id":"nope","topic":"orders","payload":""}`),
		eventMsg(true, 0x504, outboxPrefix, `{"id":"0190a5d0-0000-7000-8000-000000000001","payload":""}`),
		eventMsg(true, 0x505, outboxPrefix, `[1,2]`),
		eventMsg(true, 0x506, outboxPrefix, good),
		commitMsg(0x500, 0x510, at),
	)
	require.Len(t, parts, 1)
	require.Equal(t, []string{"0190a5d0-0000-7000-8000-000000000001"}, ids(parts[0]))
	require.Equal(t, int64(6), skipped.Load())
	out := logs.String()
	require.Equal(t, 6, strings.Count(out, "level=ERROR"), out)
	for _, want := range []string{"lsn=0/400", "lsn=0/501", "lsn=0/505", "not transactional", "no topic", "no id", "not a UUID",
		"not a JSON object", "hunter2"} {
		if want == "hunter2" {
			require.NotContains(t, out, want, "the preview is scrubbed")
			continue
		}
		require.Contains(t, out, want)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		require.Less(t, len(line), 1200, "the preview is cut")
	}
}

func ids(tx Transaction) []string {
	var out []string
	for _, e := range tx.Events {
		out = append(out, e.ID)
	}
	return out
}

// A message with an id and a topic whose other fields cannot all be read
// is handed out with what could be read and a header that names the
// problem and that no event may carry: the relay's validation (as
// herald.Prepare's) refuses it, saying why, so it goes to the dead
// letters instead of being published without the lost fields.
func TestDecoderMarksAnEventMessageWithFieldsThatCannotBeRead(t *testing.T) {
	t.Parallel()
	const id = `"id":"0190a5d0-0000-7000-8000-000000000001","topic":"orders"`
	for what, tc := range map[string]struct{ content, reason string }{
		"a payload that is not base64":    {`{` + id + `,"payload":"{\"total\":4200}"}`, "payload: illegal base64"},
		"no payload":                      {`{` + id + `}`, "payload: missing"},
		"headers that are no object":      {`{` + id + `,"payload":"","headers":"x"}`, "headers: not a JSON object of strings"},
		"a header that is no string":      {`{` + id + `,"payload":"","headers":{"a":"b","n":1}}`, `headers: "n" is not a string`},
		"a NUL in a header":               {`{` + id + `,"payload":"","headers":{"a":"b\u0000c"}}`, `headers: "a" contains a NUL byte`},
		"a NUL in the key":                {`{` + id + `,"payload":"","key":"k\u0000"}`, "key: contains a NUL byte"},
		"a key that is no string":         {`{` + id + `,"payload":"","key":7}`, "key: json: cannot unmarshal"},
		"an event version of 0":           {`{` + id + `,"payload":"","event_version":0}`, "event_version: 0 is not between"},
		"a fractional event version":      {`{` + id + `,"payload":"","event_version":1.5}`, "event_version: json"},
		"a negative aggregate version":    {`{` + id + `,"payload":"","aggregate_version":-3}`, "aggregate_version: -3 is negative"},
		"a created_at that is no time":    {`{` + id + `,"payload":"","created_at":"infinity"}`, "created_at:"},
		"an available_at that is no time": {`{` + id + `,"payload":"","available_at":"tomorrow"}`, "available_at:"},
		"content that is not UTF-8":       {`{` + id + `,"payload":"","type":"` + "\xff" + `"}`, "content: not valid UTF-8"},
	} {
		env, ok, problem := messageEnvelope([]byte(tc.content))
		require.True(t, ok, what)
		require.ErrorContains(t, problem, tc.reason, what)
		herald.MarkUnreadable(&env, "event message: "+problem.Error())
		_, err := herald.Prepare([]herald.Message{env.Message}, 0)
		require.ErrorIs(t, err, herald.ErrInvalidMessage, what)
		quoted := strconv.Quote(herald.UnreadableHeader + "event message: " + tc.reason) // as the validation's error shows the name
		require.ErrorContains(t, err, quoted[1:len(quoted)-1], what)
		for k, v := range env.Headers {
			require.NotContains(t, k+v+env.Key, "\x00", what)
		}
	}

	// The reason is cut to a header name's length, so that the
	// validation's error still shows it.
	env, ok, problem := messageEnvelope([]byte(`{` + id + `,"payload":"","headers":{"` + strings.Repeat("é", 300) + `":1}}`))
	require.True(t, ok)
	herald.MarkUnreadable(&env, "event message: "+problem.Error())
	_, err := herald.Prepare([]herald.Message{env.Message}, 0)
	require.ErrorContains(t, err, herald.UnreadableHeader+"event message: headers:")
}

// Whatever a message holds, reading it neither panics nor hands out an
// event that the table cannot take back (Return writes a failed event as
// a row: a UUID id, a topic, no NUL in text or headers), and an event
// read with a problem never passes validation.
func FuzzMessageEnvelope(f *testing.F) {
	for _, seed := range []string{
		`{"id":"0190a5d0-0000-7000-8000-000000000001","seq":4,"topic":"orders","key":"k","payload":"aGk=",` +
			`"headers":{"a":"b"},"event_version":2,"aggregate_version":3,"created_at":"2026-01-02T03:04:05Z"}`,
		`{"id":"0190a5d0-0000-7000-8000-000000000001","topic":"o","payload":"!!","headers":{"a\u0000":1}}`,
		`{"id":"{0190a5d0-0000-7000-8000-000000000001}","topic":"a b","key":"\u0000","payload":""}`,
		`{"id":1,"topic":["x"]}`, `null`, `"x"`, "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		env, ok, problem := messageEnvelope(content)
		if !ok {
			require.Error(t, problem)
			return
		}
		require.NotEmpty(t, env.Topic)
		require.Len(t, env.ID, 36)
		for _, s := range []string{env.Topic, env.Key, env.Type, env.AggregateType, env.AggregateID} {
			require.NotContains(t, s, "\x00")
		}
		for k, v := range env.Headers {
			require.NotContains(t, k+v, "\x00")
		}
		require.GreaterOrEqual(t, env.Seq, int64(0))
		if problem != nil {
			herald.MarkUnreadable(&env, "event message: "+problem.Error())
			_, err := herald.Prepare([]herald.Message{env.Message}, 0)
			require.Error(t, err)
		}
	})
}

// pgoutput takes the messages option from PostgreSQL 14 on.
func TestMessagesOptionFromPostgreSQL14(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"13.4": false, "13.16 (Debian 13.16-1)": false, "14.0": true,
		"15.20 (Debian 15.20-0+deb12u1)": true, "17beta1": true, "": true, "unknown": true} {
		require.Equal(t, want, messagesOption(v), v)
	}
}
