package herald

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// RelayConfig configures a Relay. Store and Publisher are required; every
// other field has a default.
type RelayConfig struct {
	// Store is the outbox table, from a driver such as heraldpg.New.
	Store Store
	// Publisher delivers batches to the broker.
	Publisher Publisher
	// Logger receives the relay's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Owner names this relay in claimed rows (claimed_by), for operators.
	// Defaults to "hostname/pid".
	Owner string
	// BatchSize is the most events claimed, published and acknowledged
	// together. Defaults to 1000.
	BatchSize int
	// MaxInFlight is how many claimed batches may be publishing at once.
	// A batch that is sent gives its slot to the next claim while its
	// acknowledgement is written; as many as MaxInFlight may wait for
	// theirs. Defaults to 4. A Store with fair claims (FairClaims) gets
	// two more slots, for the fair lane's small batches.
	MaxInFlight int
	// ClaimConcurrency is how many claims may run at once, sharing the
	// MaxInFlight publish slots: while one claim waits for the database,
	// another can. Concurrent claims of one relay take different rows and
	// keys as claims of several relays do. Defaults to 2; at most
	// MaxInFlight.
	ClaimConcurrency int
	// MaxInFlightBytes bounds the payload and header bytes of the events
	// this relay holds claimed and not yet acknowledged: a claim asks the
	// store for no more than what is left of it, and none is made while
	// nothing is left. One event larger than the whole budget is still
	// claimed, alone, so nothing is stuck behind it. The bound is what
	// keeps a backlog of large events from exhausting memory: batches
	// shrink to fit it. Defaults to 64 MiB; a negative value turns the
	// bound off.
	MaxInFlightBytes int64
	// Lease is how long a claim holds its rows before any relay may rescue
	// them. It must exceed PublishTimeout by a margin for the acknowledgement.
	// Defaults to 1m.
	Lease time.Duration
	// PublishTimeout bounds one Publish call. Defaults to 20s.
	PublishTimeout time.Duration
	// StopGrace is how long, once Stop's context has ended, the relay
	// still tries to write down the outcomes of its in-flight batches and
	// release their unpublished rows. What it has not written by then is
	// left to the rescuer, which returns the rows once their lease
	// expires. A slow or far database may need more. Defaults to 2s.
	StopGrace time.Duration
	// PollInterval is the wait between claims while there is work but less
	// than a full batch. A full batch is followed by the next claim at once.
	// Defaults to 5ms.
	PollInterval time.Duration
	// IdlePollInterval is the longest wait between claims when the outbox is
	// empty; the wait doubles from PollInterval up to it. Defaults to 250ms.
	IdlePollInterval time.Duration
	// Retry is the retry policy for failed events. Zero fields take the
	// defaults of DefaultRetryPolicy.
	Retry RetryPolicy
	// OutageBackoffCap is the longest pause in claiming while the
	// destination is unreachable. Defaults to 5s.
	OutageBackoffCap time.Duration
	// RescueInterval is how often this relay returns rows whose lease
	// expired (their relay died) to ready. Defaults to 5s.
	RescueInterval time.Duration
	// Retention is how long published rows are kept. Zero means the
	// default; a negative value keeps them forever. Dead rows are always
	// kept until an operator acts. Defaults to 24h.
	Retention time.Duration
	// DeleteOnPublish deletes each event's row once the broker confirms
	// it, instead of keeping it as published for Retention. Operators then
	// see no published events (herald status, the admin page), and the
	// database does the least work an event can cost: the acknowledgement
	// writes no row version and no index entry, and retention has nothing
	// to delete (README, "What an event costs"). Defaults to false.
	DeleteOnPublish bool
	// CleanupInterval is how often retention runs. Defaults to 1m.
	CleanupInterval time.Duration
	// CleanupBatchSize is the most rows one retention statement deletes, so
	// no statement holds locks for long. Defaults to 1000.
	CleanupBatchSize int

	// Unordered turns per-key ordering off for the whole relay: events are
	// claimed by age alone and published in parallel whatever their key,
	// for throughput-first deployments. Defaults to false: the events of
	// one key are published in the order they committed, by one claimer at
	// a time, and a failing event holds back the later events of its key
	// only.
	Unordered bool
	// UnorderedTopics are topics whose events are claimed by age alone even
	// when the relay is ordered. Events with an empty key are never
	// ordered. Defaults to none.
	UnorderedTopics []string
	// SkipDeadTopics are topics whose dead events do not park their key:
	// the key's later events go on without them. On every other topic a
	// dead event parks its key until an operator requeues or discards it
	// (herald keys blocked). Defaults to none.
	SkipDeadTopics []string
	// Observer is told what the relay does, for metrics and tracing
	// (heraldprom): it implements one or more of the hooks ClaimedHook,
	// AcknowledgedHook and RescuedHook, and hears those events only (see
	// Observer). NewRelay refuses a value that implements none of them.
	// Defaults to none.
	Observer Observer
	// Clock is the relay's time, for tests that move it instead of
	// sleeping. Defaults to the system clock.
	Clock Clock
	// HeartbeatInterval is how often the relay records itself in the
	// database, when its Store implements Heartbeats: owner, version,
	// start, the rows it holds, what it published and its last claim, for
	// heraldadmin.Relays (herald status, the admin page). A relay not heard
	// of for ten intervals is no longer listed. Defaults to 5s; a negative
	// value turns heartbeats off.
	HeartbeatInterval time.Duration
	// DestinationOf names the destination a topic's events go to, so
	// that pausing a destination (heraldadmin.Admin's Pause with
	// herald.PauseDestination) holds every topic routed to it; the herald
	// daemon sets it from its routes. Topic pauses need nothing. Defaults
	// to nil: destination pauses hold nothing.
	DestinationOf func(topic string) string
	// MaxPerKey is the most events of one key in one claimed batch. They
	// are published pipelined, in order; a hot key moves MaxPerKey events
	// per broker round trip. Defaults to BatchSize.
	MaxPerKey int
	// Source, when set, is a change-data-capture source (heraldcdc): the
	// relay publishes the events it reads from the database's log, in
	// commit order, and writes to the table only those that fail and the
	// later events of their key, which it claims from there as usual
	// (see Source). It publishes one batch of the source at a time (which
	// keeps each key in order across batches), so a batch of it holds up
	// to BatchSize × MaxInFlight events: what the claim path keeps in
	// flight in several batches (the source may bound a batch's bytes:
	// heraldcdc's BufferBytes). The Store must implement StreamStore.
	// Defaults to nil: the relay claims every event from the table.
	Source Source
}

func (c *RelayConfig) withDefaults() RelayConfig {
	out := *c
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Owner == "" {
		host, _ := os.Hostname()
		out.Owner = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	setDefault(&out.BatchSize, 1000)
	setDefault(&out.MaxInFlight, 4)
	setDefault(&out.ClaimConcurrency, min(2, out.MaxInFlight))
	setDefault(&out.Lease, time.Minute)
	setDefault(&out.PublishTimeout, 20*time.Second)
	setDefault(&out.StopGrace, 2*time.Second)
	setDefault(&out.PollInterval, 5*time.Millisecond)
	setDefault(&out.IdlePollInterval, 250*time.Millisecond)
	setDefault(&out.OutageBackoffCap, 5*time.Second)
	setDefault(&out.RescueInterval, 5*time.Second)
	setDefault(&out.Retention, 24*time.Hour)
	setDefault(&out.CleanupInterval, time.Minute)
	setDefault(&out.CleanupBatchSize, 1000)
	setDefault(&out.MaxPerKey, out.BatchSize)
	setDefault(&out.HeartbeatInterval, DefaultHeartbeatInterval)
	if out.MaxInFlightBytes == 0 {
		out.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if out.Clock == nil {
		out.Clock = systemClock{}
	}
	out.Retry = out.Retry.withDefaults()
	return out
}

// DefaultHeartbeatInterval is RelayConfig.HeartbeatInterval's default.
const DefaultHeartbeatInterval = 5 * time.Second

// DefaultMaxInFlightBytes is RelayConfig.MaxInFlightBytes's default. With
// the copies a publisher makes while sending, it keeps a relay draining
// 1 MB events well under 256 MiB of memory.
const DefaultMaxInFlightBytes = 64 << 20

func setDefault[T int | time.Duration](p *T, v T) {
	if *p == 0 {
		*p = v
	}
}

// errNoStreamStore is RelayConfig.validate's reason for refusing a Source
// on a Store that cannot take events back.
var errNoStreamStore = errors.New("herald: RelayConfig.Source needs a Store that implements herald.StreamStore (driver/heraldpg)")

func (c *RelayConfig) validate() error {
	var errs []error
	check := func(ok bool, field, rule string) {
		if !ok {
			errs = append(errs, fmt.Errorf("herald: RelayConfig.%s %s", field, rule))
		}
	}
	check(c.Store != nil, "Store", "is required")
	check(c.Publisher != nil, "Publisher", "is required")
	check(c.BatchSize > 0, "BatchSize", "must be positive")
	check(c.MaxInFlight > 0, "MaxInFlight", "must be positive")
	check(c.ClaimConcurrency > 0 && c.ClaimConcurrency <= c.MaxInFlight, "ClaimConcurrency", "must be between 1 and MaxInFlight")
	check(c.PublishTimeout > 0, "PublishTimeout", "must be positive")
	check(c.StopGrace > 0, "StopGrace", "must be positive")
	check(c.Lease >= c.PublishTimeout+time.Second, "Lease", "must exceed PublishTimeout by at least 1s")
	check(c.PollInterval > 0, "PollInterval", "must be positive")
	check(c.IdlePollInterval >= c.PollInterval, "IdlePollInterval", "must not be below PollInterval")
	check(c.OutageBackoffCap > 0, "OutageBackoffCap", "must be positive")
	check(c.RescueInterval > 0, "RescueInterval", "must be positive")
	check(c.CleanupInterval > 0, "CleanupInterval", "must be positive")
	check(c.CleanupBatchSize > 0, "CleanupBatchSize", "must be positive")
	check(c.MaxPerKey > 0 && c.MaxPerKey <= c.BatchSize, "MaxPerKey", "must be between 1 and BatchSize")
	for _, t := range c.UnorderedTopics {
		check(strings.TrimSpace(t) != "", "UnorderedTopics", "must not hold an empty topic")
	}
	for _, t := range c.SkipDeadTopics {
		check(strings.TrimSpace(t) != "", "SkipDeadTopics", "must not hold an empty topic")
	}
	if _, ok := c.Store.(StreamStore); c.Source != nil && !ok {
		errs = append(errs, errNoStreamStore)
	}
	if err := validateObserver(c.Observer); err != nil {
		errs = append(errs, err)
	}
	if err := c.Retry.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
