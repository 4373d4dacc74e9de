package heraldcdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Config configures a Stream.
type Config struct {
	// ConnString is a PostgreSQL DSN of the outbox's database, for a role
	// with the REPLICATION attribute. Required.
	ConnString string
	// Schema and Table name the outbox table. Default to public and
	// herald_outbox.
	Schema, Table string
	// Publication and Slot name the publication on the outbox table and the
	// logical replication slot. Default to herald_outbox (the table's
	// name). They must match ^[a-z_][a-z0-9_]{0,39}$.
	Publication, Slot string
	// CreateSlot lets Open create the publication and the slot when they
	// are missing: for the first start only. Without it a missing slot is
	// refused, since a slot made anew would begin at the current WAL
	// position and skip whatever was committed in between. With it too, a
	// missing slot is refused when the table's inserts are streamed
	// already and no other slot of the table exists: the rows inserted
	// since were read by none (herald.Relay.Start makes inserts streamed,
	// after the slot). Defaults to false.
	CreateSlot bool
	// StatusInterval is how often the confirmed position is sent to
	// PostgreSQL when it has not changed. Defaults to 10s.
	StatusInterval time.Duration
	// HeartbeatInterval is how often the stream writes a heartbeat into
	// the WAL (a non-transactional logical decoding message, on a normal
	// connection of its own), so that the slot's confirmed position moves
	// while the outbox is idle and other tables are busy: otherwise the
	// slot holds back their WAL until the next outbox event. Zero or
	// negative turns heartbeats off. Heartbeats need PostgreSQL 14 or
	// later. Defaults to 10s.
	HeartbeatInterval time.Duration
	// PartRows and PartBytes bound the parts in which Next hands out a
	// transaction: a part ends once it holds PartRows rows or PartBytes
	// bytes of rows (payloads, headers and the other fields, as held in
	// memory, roughly), and a transaction's last part at its commit.
	// PartBytes must not exceed BufferBytes. Default to 1000 and 4 MiB
	// (BufferBytes when it is less).
	PartRows, PartBytes int
	// BufferBytes bounds the memory of the parts read and not yet taken by
	// Next: the stream stops reading from PostgreSQL (which keeps the rest
	// of the transaction, on disk if need be, and waits) while taking
	// another would make them hold more. A part larger than that alone
	// still passes when nothing else waits. A Source's batch holds at most
	// as much too (Source.Next). Defaults to 16 MiB.
	BufferBytes int
	// StandbyInterval is how often a Source whose slot another reader
	// streams tries to take it (Source.Active). Each try is one query on
	// a normal connection. At least 10ms. Defaults to 1s.
	StandbyInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Transaction is a committed transaction's outbox rows, in their order,
// or a part of them: Next hands out a transaction in parts of at most
// Config.PartRows rows and about Config.PartBytes bytes, in order, and
// the next transaction's only after its last. A small transaction is one
// part, its last. The rows of every part are committed: without the
// streaming option, which Open does not ask for, PostgreSQL sends a
// transaction only once it committed, BEGIN with the commit's position
// and time; only its End comes later, with COMMIT and the last part.
type Transaction struct {
	// End is the end of the transaction's commit record: the position to
	// confirm once every event is acknowledged (Tracker.Finish, or
	// Tracker.Add for a transaction in one part). Zero in every part but
	// the last: more of the transaction follows.
	End pglogrepl.LSN
	// Commit is the commit record's position, the same in every part.
	Commit pglogrepl.LSN
	// CommitTime is when it committed, the same in every part.
	CommitTime time.Time
	// Part numbers the part in its transaction, from 0.
	Part int
	// Events are the inserted rows in the streamed state, as the relay
	// claims them, and the events written as logical decoding messages
	// (Seq 0 unless the producer drew one), in the transaction's order.
	// A row or message with an id and a topic whose other fields could
	// not all be read (headers that are not an object of strings, ...)
	// is among them, with a header that makes the relay refuse it and
	// says why: it becomes a dead letter in its place, parking its key.
	Events []herald.Envelope
	// Unreadable are the ids of inserted rows in the streamed state that
	// could not be read even as that (their columns do not match the
	// table's), with why: only their row, if any, records it.
	Unreadable []herald.Failure
	// Polled are the ids of inserted rows in another state than streamed
	// (ready rows written before the table's inserts defaulted to
	// streamed, rows a relay wrote back): they belong to the polling path,
	// which claims them, and are not events of the stream.
	Polled []string

	size int // what the part holds in memory, roughly: for Config.BufferBytes
}

// rows counts the part's rows: events, unreadable and polled.
func (tx *Transaction) rows() int { return len(tx.Events) + len(tx.Unreadable) + len(tx.Polled) }

// Stream reads the outbox table's committed inserts from a logical
// replication slot, and confirms positions to PostgreSQL.
type Stream struct {
	cfg   Config
	conn  *pgconn.PgConn
	start pglogrepl.LSN
	done  chan struct{}
	stop  context.CancelFunc
	// ready has a token when a part was queued; room when Next took one.
	ready, room chan struct{}
	// beating is closed when the heartbeat goroutine ends; nil without
	// heartbeats.
	beating chan struct{}

	// pos is the slot's row in the record of positions; recorder's
	// goroutine writes wanted there before the slot may confirm it, and
	// recording is closed when that goroutine ends.
	pos       positions
	recordNow chan struct{}
	recording chan struct{}

	mu sync.Mutex
	// queue are the parts read and not taken by Next, oldest first;
	// queued the bytes they hold (Transaction.size).
	queue  []Transaction
	queued int
	// wanted is the furthest position that may be confirmed (Confirm, a
	// heartbeat, a keepalive while caught up); confirmed is what the
	// slot is told: wanted once it is recorded.
	wanted    pglogrepl.LSN
	confirmed pglogrepl.LSN
	// wantedAt is when the transaction that ends at wanted committed
	// (Recorded.At); zero after a heartbeat or a keepalive, which the
	// record takes as its now().
	wantedAt  time.Time
	recordErr error // why recording failed; it ends the stream
	// unconfirmed are the transactions handed out (queued), even partly,
	// and not yet confirmed, oldest first.
	unconfirmed []handed
	beats       int   // heartbeats confirmed
	err         error // why the reading loop ended

	skipped atomic.Int64 // SkippedMessages
}

// handed is a transaction the stream handed out.
type handed struct {
	end        pglogrepl.LSN // zero until its last part is handed out
	commitTime time.Time
}

// errStreamClosed is Next's error once Close stopped the stream.
var errStreamClosed = errors.New("heraldcdc: stream closed")

// heartbeatPrefix is the prefix of the stream's heartbeat messages; their
// content is the slot's name.
const heartbeatPrefix = "herald.heartbeat"

// Open checks the slot, connects for replication and starts streaming
// from the slot's confirmed position. A slot that another reader streams
// is a *SlotInUseError: Open does not wait for it (NewSource does).
func Open(ctx context.Context, cfg Config) (*Stream, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	start, err := prepare(ctx, c)
	if err != nil {
		return nil, err
	}
	pc, err := pgconn.ParseConfig(c.ConnString)
	if err != nil {
		return nil, fmt.Errorf("heraldcdc: Config.ConnString: %w", err)
	}
	// Values come as the output functions print them: fix their style.
	pc.RuntimeParams["replication"] = "database"
	pc.RuntimeParams["DateStyle"] = "ISO"
	pc.RuntimeParams["TimeZone"] = "UTC"
	pc.RuntimeParams["bytea_output"] = "hex"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("heraldcdc: connecting for replication: %w", err)
	}
	// Messages: the stream's heartbeats, and the events producers write
	// as logical decoding messages (heraldpg's Config.EmitMessages).
	// pgoutput has the option from PostgreSQL 14 on; before, it refuses
	// it, and there are neither.
	args := []string{"proto_version '1'", "publication_names '" + c.Publication + "'"}
	if messagesOption(conn.ParameterStatus("server_version")) {
		args = append(args, "messages 'true'")
	}
	err = pglogrepl.StartReplication(ctx, conn, c.Slot, start, pglogrepl.StartReplicationOptions{PluginArgs: args})
	if err != nil {
		_ = conn.Close(context.Background())
		// The fence: PostgreSQL lets one walsender at a time stream a slot.
		// prepare saw it free, and another reader took it since.
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == sqlstateObjectInUse {
			return nil, &SlotInUseError{Slot: c.Slot, PID: slotHolder(ctx, c), Err: err}
		}
		return nil, fmt.Errorf("heraldcdc: starting replication from slot %s: %w", c.Slot, err)
	}
	loopCtx, stop := context.WithCancel(context.Background())
	s := &Stream{cfg: c, conn: conn, start: start, wanted: start, confirmed: start, done: make(chan struct{}), stop: stop,
		ready: make(chan struct{}, 1), room: make(chan struct{}, 1),
		pos: newPositions(c), recordNow: make(chan struct{}, 1), recording: make(chan struct{})}
	go s.loop(loopCtx)
	go s.recorder(loopCtx)
	if c.HeartbeatInterval > 0 {
		s.beating = make(chan struct{})
		go s.heartbeat(loopCtx)
	}
	return s, nil
}

// sizes sets and checks BufferBytes, PartRows and PartBytes.
func (c *Config) sizes() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"BufferBytes", c.BufferBytes}, {"PartRows", c.PartRows}, {"PartBytes", c.PartBytes}} {
		if f.v < 0 {
			return fmt.Errorf("heraldcdc: Config.%s %d must not be negative", f.name, f.v)
		}
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = 16 << 20
	}
	if c.PartRows == 0 {
		c.PartRows = 1000
	}
	if c.PartBytes == 0 {
		c.PartBytes = min(4<<20, c.BufferBytes)
	}
	if c.PartBytes > c.BufferBytes {
		return fmt.Errorf("heraldcdc: Config.PartBytes %d must not exceed Config.BufferBytes %d", c.PartBytes, c.BufferBytes)
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if c.ConnString == "" {
		return c, errors.New("heraldcdc: Config.ConnString is required")
	}
	if c.Schema == "" {
		c.Schema = "public"
	}
	if c.Table == "" {
		c.Table = "herald_outbox"
	}
	if c.Publication == "" {
		c.Publication = c.Table
	}
	if c.Slot == "" {
		c.Slot = c.Table
	}
	for _, f := range []struct{ name, v string }{{"Schema", c.Schema}, {"Table", c.Table}, {"Publication", c.Publication}, {"Slot", c.Slot}} {
		if !sqlstore.Identifier.MatchString(f.v) {
			return c, fmt.Errorf("heraldcdc: Config.%s %q must match %s", f.name, f.v, sqlstore.Identifier)
		}
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = 10 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if err := c.sizes(); err != nil {
		return c, err
	}
	switch {
	case c.StandbyInterval == 0:
		c.StandbyInterval = time.Second
	case c.StandbyInterval < 10*time.Millisecond:
		return c, fmt.Errorf("heraldcdc: Config.StandbyInterval %s must be at least 10ms", c.StandbyInterval)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// prepare makes sure the publication and the slot exist (creating them
// only with CreateSlot) and that the slot can still stream, and returns
// the slot's confirmed position. A slot that another reader streams is a
// *SlotInUseError, found here without a replication connection: a
// standby asks every StandbyInterval, and a refused START_REPLICATION
// would write an error to the server's log each time. That check is only
// a shortcut (the slot can be taken between it and Open's
// START_REPLICATION, which is the fence).
func prepare(ctx context.Context, c Config) (pglogrepl.LSN, error) {
	conn, err := pgx.Connect(ctx, c.ConnString)
	if err != nil {
		return 0, fmt.Errorf("heraldcdc: connecting: %w", err)
	}
	defer conn.Close(context.Background())
	table := pgx.Identifier{c.Schema, c.Table}.Sanitize()
	var pubExists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, c.Publication).Scan(&pubExists); err != nil {
		return 0, fmt.Errorf("heraldcdc: reading publications: %w", err)
	}
	if !pubExists {
		if !c.CreateSlot {
			return 0, refuse("heraldcdc: publication %s does not exist: create it with CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert'), or start once with Config.CreateSlot",
				c.Publication, c.Publication, table)
		}
		if _, err := conn.Exec(ctx, `CREATE PUBLICATION `+pgx.Identifier{c.Publication}.Sanitize()+` FOR TABLE `+table+` WITH (publish = 'insert')`); err != nil {
			return 0, fmt.Errorf("heraldcdc: creating publication %s: %w", c.Publication, err)
		}
	}
	pos := newPositions(c)
	rec, hasRecord, err := pos.recorded(ctx, conn)
	if err != nil {
		return 0, err
	}
	var (
		plugin, walStatus string
		confirmed         *string
		activePID         int
	)
	err = conn.QueryRow(ctx, `SELECT plugin, coalesce(wal_status, ''), confirmed_flush_lsn::text, coalesce(active_pid, 0)
		FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, c.Slot).
		Scan(&plugin, &walStatus, &confirmed, &activePID)
	if errors.Is(err, pgx.ErrNoRows) && !hasRecord {
		// Before the slot is made, or refused as missing: inserts already
		// streamed with no slot of the table to read them is the one
		// loss neither can mend.
		if err := checkNotStreamedYet(ctx, conn, c); err != nil {
			return 0, err
		}
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows) && hasRecord:
		return 0, pos.missing(rec, timeline(ctx, conn))
	case errors.Is(err, pgx.ErrNoRows) && c.CreateSlot:
		var lsn string
		err := conn.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, c.Slot).Scan(&lsn)
		if err != nil {
			return 0, fmt.Errorf("heraldcdc: creating slot %s: %w", c.Slot, err)
		}
		c.Logger.Info("created the replication slot", "slot", c.Slot, "lsn", lsn)
		start, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			return 0, err
		}
		return start, pos.record(ctx, conn, start, time.Time{})
	case errors.Is(err, pgx.ErrNoRows):
		return 0, refuse("heraldcdc: replication slot %s does not exist. A slot made now would start at the current WAL position "+
			"and skip what was committed since the last one: relay that gap by polling first (herald relay without --source cdc) "+
			"until the outbox is drained, then start once with the slot created", c.Slot)
	case err != nil:
		return 0, fmt.Errorf("heraldcdc: reading slot %s: %w", c.Slot, err)
	case plugin != "pgoutput":
		return 0, refuse("heraldcdc: replication slot %s uses plugin %s, not pgoutput", c.Slot, plugin)
	case walStatus == "lost" && hasRecord:
		return 0, refuse("heraldcdc: replication slot %s lost WAL it needed (wal_status = lost, max_slot_wal_keep_size): "+
			"events committed while it fell behind cannot be read from it. Drop it (SELECT pg_drop_replication_slot('%s')). %s",
			c.Slot, c.Slot, recovery(c.Slot, rec))
	case walStatus == "lost":
		return 0, refuse("heraldcdc: replication slot %s lost WAL it needed (wal_status = lost, max_slot_wal_keep_size): "+
			"events committed while it fell behind cannot be read from it. Drop it, relay the outbox by polling until drained, then create it again", c.Slot)
	case confirmed == nil:
		return 0, refuse("heraldcdc: replication slot %s has no confirmed position", c.Slot)
	case activePID != 0:
		return 0, &SlotInUseError{Slot: c.Slot, PID: activePID}
	}
	at, err := pglogrepl.ParseLSN(*confirmed)
	if err != nil {
		return 0, err
	}
	return at, pos.check(ctx, conn, at)
}

// slotHolder is the pid of the walsender that streams the slot, or 0 when
// it cannot be read: only for SlotInUseError's message.
func slotHolder(ctx context.Context, c Config) int {
	conn, err := pgx.Connect(ctx, c.ConnString)
	if err != nil {
		return 0
	}
	defer conn.Close(context.Background())
	var pid int
	_ = conn.QueryRow(ctx, `SELECT coalesce(active_pid, 0) FROM pg_replication_slots
		WHERE slot_name = $1 AND database = current_database()`, c.Slot).Scan(&pid)
	return pid
}

// refusal is Open's error for a publication or slot that cannot be
// streamed from as it is (missing, lost, of another plugin): unlike a
// connection that failed, waiting does not mend it, so a Source that
// reconnects reports it instead of retrying.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refuse(format string, args ...any) error { return &refusal{fmt.Sprintf(format, args...)} }

// sqlstateObjectInUse is PostgreSQL's object_in_use, START_REPLICATION's
// answer for a slot that another walsender streams.
const sqlstateObjectInUse = "55006"

// SlotInUseError is Open's error for a slot that another reader streams:
// PostgreSQL lets one walsender at a time read a slot. It passes once that
// reader closes its stream or its connection ends; a Source waits for it
// (Source.Active).
type SlotInUseError struct {
	Slot string
	// PID is the walsender's backend pid (pg_replication_slots.active_pid,
	// pg_stat_replication.pid), 0 when it was not seen.
	PID int
	// Err is the server's refusal of START_REPLICATION (a *pgconn.PgError
	// of SQLSTATE 55006), nil when the slot was seen active before it.
	Err error
}

func (e *SlotInUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("heraldcdc: replication slot %s is streamed by another reader", e.Slot)
	}
	return fmt.Sprintf("heraldcdc: replication slot %s is streamed by another reader (pid %d)", e.Slot, e.PID)
}

func (e *SlotInUseError) Unwrap() error { return e.Err }

// Start is the position the stream started from.
func (s *Stream) Start() pglogrepl.LSN { return s.start }

// Next returns the next part of a committed transaction (see
// Transaction), in commit order. Its error is the stream's once it ended
// and every part read before was taken.
func (s *Stream) Next(ctx context.Context) (Transaction, error) {
	for {
		tx, ok, err := s.take()
		if ok || err != nil {
			return tx, err
		}
		select {
		case <-ctx.Done():
			return Transaction{}, context.Cause(ctx)
		case <-s.ready:
		case <-s.done:
		}
	}
}

// poll returns a part that is queued already, or false without waiting.
// Once the stream ended, Next gives its error.
func (s *Stream) poll() (Transaction, bool) {
	tx, ok, _ := s.take()
	return tx, ok
}

// take returns the oldest queued part, or false when none is: with the
// stream's error once it ended.
func (s *Stream) take() (Transaction, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return Transaction{}, false, s.err
	}
	tx := s.queue[0]
	s.queue[0] = Transaction{}
	s.queue = s.queue[1:]
	s.queued -= tx.size
	notify(s.room)
	if len(s.queue) > 0 {
		notify(s.ready) // for another caller of Next, were there one
	}
	return tx, true, nil
}

// notify leaves a token in c (of capacity 1) unless one is there.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Confirm lets PostgreSQL release the WAL up to lsn: once the position is
// written in the record of positions (record.go), the slot's
// confirmed_flush_lsn moves there with the next status update. A
// position before the last one confirmed is ignored. Pass only a
// Transaction's End (Tracker.Confirmed): the stream's heartbeats rely on
// it to know what was acknowledged.
func (s *Stream) Confirm(lsn pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wanted = max(s.wanted, lsn)
	i := 0
	for i < len(s.unconfirmed) && s.unconfirmed[i].end != 0 && s.unconfirmed[i].end <= s.wanted {
		i++
	}
	if i > 0 {
		s.wantedAt = s.unconfirmed[i-1].commitTime
	}
	s.unconfirmed = append(s.unconfirmed[:0], s.unconfirmed[i:]...)
	notify(s.recordNow)
}

// Confirmed is the position last confirmed (recorded, and sent or about
// to be sent to PostgreSQL), by Confirm, a heartbeat or a keepalive.
func (s *Stream) Confirmed() pglogrepl.LSN {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed
}

// OldestUnconfirmed is the commit time of the oldest transaction the
// stream handed out (to Next's queue), even partly, that is not confirmed
// yet, and
// false when every one is: how far behind the acknowledgements are, as
// the database's clock saw the commit. SlotStatus gives the same lag in
// bytes.
func (s *Stream) OldestUnconfirmed() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.unconfirmed) == 0 {
		return time.Time{}, false
	}
	return s.unconfirmed[0].commitTime, true
}

// Heartbeats counts the heartbeats that moved the confirmed position.
func (s *Stream) Heartbeats() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.beats
}

// Close stops streaming, sends the confirmed position one last time,
// waits (up to 5s) for PostgreSQL to have read it, and closes the
// connection.
func (s *Stream) Close() error {
	s.stop()
	<-s.done
	<-s.recording
	if s.beating != nil {
		<-s.beating
	}
	// The loop sends what Confirm recorded within 100ms: one confirmed
	// just before Close would otherwise be lost, and a new stream would
	// deliver again what was acknowledged. Only on a connection that is
	// still good: after a failure, pgconn closes it on a goroutine of its
	// own, which a write here would race with.
	s.mu.Lock()
	stopped := errors.Is(s.err, errStreamClosed)
	s.mu.Unlock()
	if stopped && !s.conn.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
		err := s.flushRecord(ctx, nil)
		if err == nil {
			err = s.sendStatus(ctx)
		}
		if err == nil {
			err = s.endCopy()
		}
		cancel()
		if err != nil {
			s.cfg.Logger.Warn("change stream: the last confirmation did not reach the slot; the next reader delivers again what it covered",
				"slot", s.cfg.Slot, "error", herald.Scrub(err.Error()))
		}
	}
	return s.conn.Close(context.Background())
}

// endCopy ends the replication stream with a CopyDone and waits for
// PostgreSQL to end it too, so that the status update sent just before
// is read before the connection closes. Closing it at once is not
// enough: a walsender blocked sending to a reader that stopped reading
// tries its pending output before it reads what came in, and the closed
// connection fails that write and ends it with the last status update
// unread (and the reader's unread data makes the close a reset). The
// walsender answers the CopyDone once it read everything sent before it;
// what it was still sending is discarded on the way. A wait cut short
// after that answer lost nothing.
func (s *Stream) endCopy() error {
	nc := s.conn.Conn()
	if err := nc.SetReadDeadline(time.Now().Add(statusTimeout)); err != nil {
		return fmt.Errorf("heraldcdc: ending the stream: %w", err)
	}
	fe := s.conn.Frontend()
	fe.Send(&pgproto3.CopyDone{})
	if err := fe.Flush(); err != nil {
		return fmt.Errorf("heraldcdc: ending the stream: %w", err)
	}
	answered := false
	for {
		raw, err := s.conn.ReceiveMessage(context.Background())
		switch {
		case err != nil && answered:
			return nil
		case err != nil:
			return fmt.Errorf("heraldcdc: ending the stream: %w", err)
		}
		switch m := raw.(type) {
		case *pgproto3.CopyDone:
			answered = true
		case *pgproto3.ErrorResponse:
			if answered {
				return nil
			}
			return fmt.Errorf("heraldcdc: ending the stream: %s (SQLSTATE %s)", m.Message, m.Code)
		case *pgproto3.ReadyForQuery:
			return nil
		}
	}
}

// loop owns the replication connection: it reads, decodes and hands out
// parts of transactions, and sends status updates.
func (s *Stream) loop(ctx context.Context) {
	defer close(s.done)
	err := s.read(ctx)
	s.mu.Lock()
	switch {
	case s.recordErr != nil:
		err = s.recordErr
	case ctx.Err() != nil:
		err = errStreamClosed
	}
	s.err = err
	s.mu.Unlock()
	if !errors.Is(err, errStreamClosed) {
		// End the walsender now, not at Close: a database shutting down
		// waits for it, and the reader may not call again for a while.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.conn.Close(ctx)
		cancel()
	}
}

func (s *Stream) read(ctx context.Context) error {
	dec := &decoder{relations: map[uint32]*pglogrepl.RelationMessage{}, schema: s.cfg.Schema, table: s.cfg.Table, slot: s.cfg.Slot,
		partRows: s.cfg.PartRows, partBytes: s.cfg.PartBytes, logger: s.cfg.Logger, skipped: &s.skipped}
	sent := pglogrepl.LSN(0)
	nextStatus := time.Now()
	// A read waits until the connection's read deadline, not a context's
	// end: pgconn watches a context with a goroutine of its own for every
	// read, and the messages come by the thousand. The deadline wakes the
	// loop at least every 100ms to send what Confirm recorded; ctx ending
	// moves it to now. Only reads have a deadline: the writes of the
	// status, here and at Close, do not.
	nc := s.conn.Conn()
	stopWaking := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Now()) })
	defer stopWaking()
	var wake time.Time
	for {
		s.mu.Lock()
		confirmed := s.confirmed
		s.mu.Unlock()
		now := time.Now()
		if confirmed != sent || !now.Before(nextStatus) {
			if err := s.sendConfirmed(ctx, confirmed); err != nil {
				return err
			}
			sent, nextStatus = confirmed, time.Now().Add(s.cfg.StatusInterval)
		}
		if !now.Before(wake) {
			wake = now.Add(100 * time.Millisecond)
		}
		// Set again before every read: a status write that timed out
		// clears the connection's deadlines.
		if err := nc.SetReadDeadline(wake); err != nil {
			return fmt.Errorf("heraldcdc: receiving: %w", err)
		}
		if ctx.Err() != nil { // ended before the deadline was set: AfterFunc's is overwritten
			return ctx.Err()
		}
		raw, err := s.conn.ReceiveMessage(context.Background())
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && pgconn.Timeout(err):
			continue
		case err != nil:
			return fmt.Errorf("heraldcdc: receiving: %w", err)
		}
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("heraldcdc: replication failed: %s (SQLSTATE %s)", m.Message, m.Code)
		case *pgproto3.CopyData:
			if err := s.handle(ctx, dec, m.Data, &nextStatus); err != nil {
				return err
			}
		}
	}
}

// handle processes one CopyData message of the replication protocol.
func (s *Stream) handle(ctx context.Context, dec *decoder, data []byte, nextStatus *time.Time) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("heraldcdc: %w", err)
		}
		if ka.ReplyRequested {
			*nextStatus = time.Time{}
		}
		if ka.ReplyRequested && dec.cur == nil {
			s.caughtUp(ka.ServerWALEnd)
		}
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("heraldcdc: %w", err)
		}
		part, ready, beat, err := dec.decode(x.WALData)
		if beat != 0 {
			s.beat(beat)
		}
		if err != nil || !ready {
			return err
		}
		return s.push(ctx, part)
	}
	return nil
}

// push queues a part for Next, waiting while the queue holds too much.
func (s *Stream) push(ctx context.Context, part Transaction) error {
	s.mu.Lock()
	if part.Part == 0 {
		s.unconfirmed = append(s.unconfirmed, handed{commitTime: part.CommitTime})
	}
	if part.End != 0 {
		s.unconfirmed[len(s.unconfirmed)-1].end = part.End
	}
	s.mu.Unlock()
	if s.enqueue(part) {
		return nil
	}
	// While the reader is busy, keep telling PostgreSQL where it stands,
	// or wal_sender_timeout ends the connection.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.room:
			if s.enqueue(part) {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := s.sendStatus(ctx); err != nil {
				return err
			}
		}
	}
}

// enqueue queues part unless the queue would then hold more than
// Config.BufferBytes; a part alone always passes, so that one larger
// than the bound is not stuck.
func (s *Stream) enqueue(part Transaction) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 && s.queued+part.size > s.cfg.BufferBytes {
		return false
	}
	s.queue = append(s.queue, part)
	s.queued += part.size
	notify(s.ready)
	return true
}

// sendStatus sends the confirmed position now.
func (s *Stream) sendStatus(ctx context.Context) error {
	s.mu.Lock()
	confirmed := s.confirmed
	s.mu.Unlock()
	return s.sendConfirmed(ctx, confirmed)
}

// statusTimeout bounds the write of one status update.
const statusTimeout = 5 * time.Second

// sendConfirmed sends confirmed as the position PostgreSQL may release.
// The write is not cut short when ctx ends (the stream stopping): pgconn
// closes a connection whose write was interrupted, and Close would then
// have none to send the last confirmation on, so the next reader of the
// slot would deliver again what was published and confirmed.
func (s *Stream) sendConfirmed(ctx context.Context, confirmed pglogrepl.LSN) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusTimeout)
	defer cancel()
	if err := pglogrepl.SendStandbyStatusUpdate(wctx, s.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: confirmed}); err != nil {
		return fmt.Errorf("heraldcdc: sending the confirmed position: %w", err)
	}
	return nil
}

// beat confirms the position of a heartbeat read from the slot, when every
// transaction handed out before it, even partly, is confirmed.
//
// Why that is safe: a non-transactional message is decoded at its own
// place in the WAL, so every transaction that committed before it was
// handed out before it, and every one that commits after it ends after
// it. Confirming the heartbeat's position therefore skips, on a restart,
// only transactions that were handed out and confirmed already. A
// transaction still running when the heartbeat was written commits
// later, past that position, and PostgreSQL keeps its WAL by the slot's
// restart_lsn, which the confirmed position does not decide. If anything
// handed out is unconfirmed, the heartbeat is dropped: the next one, once
// the caller caught up, moves the position instead. The stream reads
// heartbeats and hands out transactions on one goroutine, so no
// transaction can be handed out between the check and the move.
//
// Parts: a heartbeat is never decoded between two parts of a transaction
// (the decoder drops one there, and PostgreSQL sends a transaction's
// changes together at its commit), so when it comes, the transaction
// handed out last had its last part handed out too, with its end. A
// transaction whose first part was handed out stays in unconfirmed, with
// no end, until its last part is, and Confirm keeps it there until a
// position past its end is confirmed: either way the heartbeat waits.
func (s *Stream) beat(lsn pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A heartbeat at or before the start was confirmed before a restart.
	if lsn > s.wanted && len(s.unconfirmed) == 0 {
		s.wanted, s.wantedAt = lsn, time.Time{}
		s.beats++
		notify(s.recordNow)
	}
}

// heartbeat writes a heartbeat every HeartbeatInterval until ctx ends, on
// a connection of its own (the replication connection is busy streaming).
// A failure is logged and retried at the next tick: heartbeats only help.
func (s *Stream) heartbeat(ctx context.Context) {
	defer close(s.beating)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(s.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if conn == nil {
			c, err := pgx.Connect(ctx, s.cfg.ConnString)
			if err != nil {
				if ctx.Err() == nil {
					s.cfg.Logger.Warn("heartbeat: connecting", "slot", s.cfg.Slot, "error", err)
				}
				continue
			}
			conn = c
		}
		_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(false, $1::text, $2::text)`, heartbeatPrefix, s.cfg.Slot)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("heartbeat: writing", "slot", s.cfg.Slot, "error", err)
			}
			_ = conn.Close(context.Background())
			conn = nil
		}
	}
}

// caughtUp confirms the server's position from a keepalive that asks for
// a reply (what it has sent), when the decoder is between transactions and
// everything handed out is confirmed: as with a heartbeat, every
// transaction that committed before that position was handed out before
// the keepalive came, and one still running commits past it. PostgreSQL
// asks for a reply when its shutdown waits for the reader to confirm
// everything it sent; the record of that position is then refused (the
// database is going down), which ends the stream and lets the walsender,
// and the database, stop. Keepalives that ask nothing are not confirmed:
// each confirmation writes the record, whose WAL would bring the next
// keepalive, round after round.
func (s *Stream) caughtUp(sent pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sent > s.wanted && len(s.unconfirmed) == 0 {
		s.wanted, s.wantedAt = sent, time.Time{}
		notify(s.recordNow)
	}
}

// recorder writes wanted into the record of positions, then lets the
// slot confirm it, until ctx ends. A write that fails ends the stream
// (its Next reports why): the position cannot be confirmed without it,
// and a stream that held on to its connection would keep a database that
// is shutting down waiting (its walsender waits for the reader to
// confirm what it sent, and the shutdown refuses the record's writes).
func (s *Stream) recorder(ctx context.Context) {
	defer close(s.recording)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.recordNow:
		}
		// A record under way is finished even if the stream stops
		// meanwhile: one cut short would leave its row locked on the
		// server for a moment, and Close, which records the last
		// confirmation on a connection of its own, would wait for that
		// lock past its timeout and send nothing; the next reader of the
		// slot would then deliver again what was published and confirmed.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusTimeout)
		err := s.flushRecord(rctx, &conn)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			s.recordErr = err
			s.mu.Unlock()
			s.stop()
			return
		}
	}
}

// flushRecord records wanted, if past what is confirmed, and confirms it.
// conn is the recorder's connection, made on first use; nil: one of its
// own, for Close.
func (s *Stream) flushRecord(ctx context.Context, conn **pgx.Conn) error {
	s.mu.Lock()
	want, at, have := s.wanted, s.wantedAt, s.confirmed
	s.mu.Unlock()
	if want <= have {
		return nil
	}
	var own *pgx.Conn
	if conn == nil {
		conn = &own
		defer func() {
			if own != nil {
				_ = own.Close(context.Background())
			}
		}()
	}
	if *conn == nil {
		c, err := pgx.Connect(ctx, s.cfg.ConnString)
		if err != nil {
			return fmt.Errorf("heraldcdc: connecting to record the position of slot %s: %w", s.cfg.Slot, err)
		}
		*conn = c
	}
	if err := s.pos.record(ctx, *conn, want, at); err != nil {
		_ = (*conn).Close(context.Background())
		*conn = nil
		return err
	}
	s.mu.Lock()
	s.confirmed = max(s.confirmed, want)
	s.mu.Unlock()
	return nil
}
