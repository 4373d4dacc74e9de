package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldpg/heraldpgprom"
	"github.com/herald-outbox/herald/heraldprom"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// relayFlags are the flags of `herald relay` beyond the database's.
type relayFlags struct {
	publisher                                        *string
	batchSize, maxInFlight, maxAttempts              *int
	lease, publishTimeout, pollInterval, idlePoll    *time.Duration
	retryBase, retryCap, maxAge, retention           *time.Duration
	rescueInterval, cleanupInterval, shutdownTimeout *time.Duration
	nats                                             natsFlags
	maxInFlightBytes, claimConcurrency               *int
	ordering, unorderedTopics, skipDeadTopics        *string
	maxPerKey                                        *int
	adminAddr                                        *string
	deleteOnPublish                                  *bool
	claimRows                                        *bool
	fairBy                                           *string
}

func addRelayFlags(f *flagSet) *relayFlags {
	retry := herald.DefaultRetryPolicy()
	return &relayFlags{
		publisher: f.String("publisher", "", "the destination `URL` of every topic: nats://[user:password@]host:4222, kafka://host:9092 "+
			"or redis://[:password@]host:6379/0; a comma-separated list for a NATS, Kafka or RabbitMQ cluster (or use --destination)"),
		batchSize:        f.Int("batch-size", 1000, "claim, publish and acknowledge up to `N` events together"),
		maxInFlight:      f.Int("max-in-flight", 4, "publish up to `N` claimed batches at once"),
		claimConcurrency: f.Int("claim-concurrency", 0, "run up to `N` claims at once, sharing the --max-in-flight slots; 0 means 2, or --max-in-flight when lower"),
		maxInFlightBytes: f.Int("max-in-flight-bytes", herald.DefaultMaxInFlightBytes,
			"hold at most `N` bytes of claimed payloads and headers (batches shrink to fit; one larger event is claimed alone); -1 turns the bound off"),
		lease:          f.Duration("lease", time.Minute, "a claim holds its rows for this `duration`; must exceed --publish-timeout by 1s"),
		publishTimeout: f.Duration("publish-timeout", 20*time.Second, "publishing one batch may take up to this `duration`"),
		pollInterval:   f.Duration("poll-interval", 5*time.Millisecond, "wait this `duration` between claims while there is work"),
		idlePoll:       f.Duration("idle-poll-interval", 250*time.Millisecond, "wait up to this `duration` between claims while the outbox is empty"),
		retryBase:      f.Duration("retry-base", retry.Base, "wait this `duration` before the first retry of a failed event; doubles each attempt"),
		retryCap:       f.Duration("retry-cap", retry.Cap, "wait at most this `duration` between two attempts"),
		maxAttempts:    f.Int("max-attempts", retry.MaxAttempts, "`N` failed attempts make an event dead"),
		maxAge:         f.Duration("max-age", retry.MaxAge, "a failure this `duration` or more after the write makes an event dead"),
		retention:      f.Retention("retention", "keep published rows for this `duration`; 0 means the default, \"forever\" or a negative duration keeps them"),
		rescueInterval: f.Duration("rescue-interval", 5*time.Second, "every `duration`, return the rows of dead relays (lease expired) to ready"),
		deleteOnPublish: f.Bool("delete-on-publish", "delete each event's row once the broker confirms it, keeping no published history "+
			"(the least database work per event; --retention then only clears rows published before)"),
		claimRows: f.Bool("claim-rows", "PostgreSQL: an ordered claim writes every event it takes instead of leasing its key "+
			"(one row per key; the default, less database work per event)"),
		fairBy:          addFairByFlag(f),
		cleanupInterval: f.Duration("cleanup-interval", time.Minute, "every `duration`, delete the published rows past --retention"),
		shutdownTimeout: f.Duration("shutdown-timeout", 30*time.Second, "on the first SIGINT/SIGTERM, let in-flight batches finish for up to this `duration`"),
		nats:            addNATSFlags(f),
		ordering: f.String("ordering", "ordered", "`mode`: ordered publishes each key's events in commit order, one relay at a time per key; "+
			"unordered claims by age alone, for throughput-first deployments"),
		unorderedTopics: f.String("unordered-topics", "", "comma-separated `topics` claimed by age alone even when ordered"),
		skipDeadTopics: f.String("skip-dead-topics", "", "comma-separated `topics` whose dead events do not park their key "+
			"(elsewhere a dead event holds back its key until requeued or discarded)"),
		maxPerKey: f.Int("max-per-key", 0, "claim up to `N` events of one key in one batch; 0 means --batch-size"),
		adminAddr: f.String("admin-addr", "", "serve the admin page, /metrics, /healthz and /readyz on this `host:port` "+
			"(:9464 is 127.0.0.1:9464; actions need HERALD_ADMIN_TOKEN); off when empty"),
	}
}

// relayConfig checks the relay flags and maps them to the relay's and the
// publisher's configurations. Every error is bad input.
func (r *relayFlags) relayConfig(inv *invocation) (*herald.RelayConfig, *heraldnats.Config, error) {
	label := inv.flags.label
	for name, v := range map[string]int{"batch-size": *r.batchSize, "max-in-flight": *r.maxInFlight,
		"max-attempts": *r.maxAttempts} {
		if v < 1 {
			return nil, nil, usagef("%s: %d is not positive", label(name), v)
		}
	}
	for name, v := range map[string]time.Duration{"lease": *r.lease, "publish-timeout": *r.publishTimeout,
		"poll-interval": *r.pollInterval, "idle-poll-interval": *r.idlePoll, "retry-cap": *r.retryCap,
		"max-age": *r.maxAge, "rescue-interval": *r.rescueInterval, "cleanup-interval": *r.cleanupInterval,
		"shutdown-timeout": *r.shutdownTimeout} {
		if v <= 0 {
			return nil, nil, usagef("%s: %s is not positive", label(name), v)
		}
	}
	switch {
	case *r.retryBase < 0:
		return nil, nil, usagef("%s: %s is negative", label("retry-base"), *r.retryBase)
	case *r.lease < *r.publishTimeout+time.Second:
		return nil, nil, usagef("%s (%s) must exceed %s (%s) by at least 1s", label("lease"), *r.lease,
			label("publish-timeout"), *r.publishTimeout)
	case *r.idlePoll < *r.pollInterval:
		return nil, nil, usagef("%s (%s) must not be below %s (%s)", label("idle-poll-interval"), *r.idlePoll,
			label("poll-interval"), *r.pollInterval)
	case *r.retryCap < *r.retryBase:
		return nil, nil, usagef("%s (%s) must not be below %s (%s)", label("retry-cap"), *r.retryCap,
			label("retry-base"), *r.retryBase)
	}
	if *r.claimConcurrency < 0 || *r.claimConcurrency > *r.maxInFlight {
		return nil, nil, usagef("%s: %d is not between 0 and %s (%d)", label("claim-concurrency"), *r.claimConcurrency,
			label("max-in-flight"), *r.maxInFlight)
	}
	if *r.maxInFlightBytes < -1 || *r.maxInFlightBytes == 0 {
		return nil, nil, usagef("%s: %d is not positive or -1 (no bound)", label("max-in-flight-bytes"), *r.maxInFlightBytes)
	}
	if *r.maxPerKey < 0 || *r.maxPerKey > *r.batchSize {
		return nil, nil, usagef("%s: %d is not between 0 and %s (%d)", label("max-per-key"), *r.maxPerKey,
			label("batch-size"), *r.batchSize)
	}
	var unordered bool
	switch *r.ordering {
	case "ordered":
	case "unordered":
		unordered = true
	default:
		return nil, nil, usagef("%s: %q is not ordered or unordered", label("ordering"), clean(*r.ordering))
	}
	unorderedTopics, err := topicList(label("unordered-topics"), *r.unorderedTopics)
	if err != nil {
		return nil, nil, err
	}
	skipDeadTopics, err := topicList(label("skip-dead-topics"), *r.skipDeadTopics)
	if err != nil {
		return nil, nil, err
	}
	if unordered && len(unorderedTopics)+len(skipDeadTopics) > 0 {
		return nil, nil, usagef("%s and %s only apply with %s ordered", label("unordered-topics"),
			label("skip-dead-topics"), label("ordering"))
	}
	rc := &herald.RelayConfig{
		Unordered: unordered, UnorderedTopics: unorderedTopics, SkipDeadTopics: skipDeadTopics, MaxPerKey: *r.maxPerKey,
		BatchSize: *r.batchSize, MaxInFlight: *r.maxInFlight, MaxInFlightBytes: int64(*r.maxInFlightBytes), Lease: *r.lease,
		ClaimConcurrency: *r.claimConcurrency,
		PublishTimeout:   *r.publishTimeout, PollInterval: *r.pollInterval, IdlePollInterval: *r.idlePoll,
		Retry: herald.RetryPolicy{
			Base: *r.retryBase, Cap: *r.retryCap, MaxAttempts: *r.maxAttempts, MaxAge: *r.maxAge,
		},
		RescueInterval: *r.rescueInterval, Retention: *r.retention, CleanupInterval: *r.cleanupInterval,
		DeleteOnPublish: *r.deleteOnPublish,
	}
	nc, err := r.nats.config(inv)
	if err != nil {
		return nil, nil, err
	}
	return rc, nc, nil
}

// natsFlags are the --nats-* flags of the commands that publish.
type natsFlags struct {
	stream, subjects, prefix    *string
	maxPending, maxPendingBytes *int
	ackTimeout                  *time.Duration
	atomicBatches               *bool
}

func addNATSFlags(f *flagSet) natsFlags {
	return natsFlags{
		stream:     f.String("nats-create-stream", "", "create or update the JetStream stream of this `name` at start; needs --nats-stream-subjects"),
		subjects:   f.String("nats-stream-subjects", "", "comma-separated `subjects` the created stream captures, such as orders.>"),
		prefix:     f.String("nats-subject-prefix", "", "`prefix` joined to every topic with a dot to make the subject"),
		maxPending: f.Int("nats-max-pending", 4096, "at most `N` messages await a PubAck"),
		maxPendingBytes: f.Int("nats-max-pending-bytes", heraldnats.DefaultMaxPendingBytes,
			"at most `N` bytes of messages await a PubAck (one larger message is sent alone)"),
		ackTimeout: f.Duration("nats-ack-timeout", 30*time.Second, "a message waits this `duration` for its PubAck"),
		atomicBatches: f.Bool("nats-atomic-batches", "send a batch's events of one subject as one JetStream atomic batch "+
			"(nats-server 2.12+, streams with allow_atomic; --nats-create-stream sets it): one round trip instead of one per event of a key"),
	}
}

// config checks the --nats-* flags and maps them to the NATS publisher's
// configuration.
func (n natsFlags) config(inv *invocation) (*heraldnats.Config, error) {
	label := inv.flags.label
	for name, v := range map[string]int{"nats-max-pending": *n.maxPending, "nats-max-pending-bytes": *n.maxPendingBytes} {
		if v < 1 {
			return nil, usagef("%s: %d is not positive", label(name), v)
		}
	}
	if *n.ackTimeout <= 0 {
		return nil, usagef("%s: %s is not positive", label("nats-ack-timeout"), *n.ackTimeout)
	}
	nc := &heraldnats.Config{
		SubjectPrefix: *n.prefix, MaxPending: *n.maxPending, MaxPendingBytes: *n.maxPendingBytes,
		AckTimeout: *n.ackTimeout, AtomicBatches: *n.atomicBatches,
	}
	if *n.prefix != "" && !natsSubject.MatchString(*n.prefix) {
		return nil, usagef("%s: %q is not a subject prefix (tokens separated by dots, no wildcards)",
			label("nats-subject-prefix"), clean(*n.prefix))
	}
	switch {
	case *n.stream != "":
		if !streamName.MatchString(*n.stream) {
			return nil, usagef("%s: %q is not a stream name (letters, digits, - and _)",
				label("nats-create-stream"), clean(*n.stream))
		}
		var subjects []string
		for _, s := range strings.Split(*n.subjects, ",") {
			if s = strings.TrimSpace(s); s != "" {
				subjects = append(subjects, s)
			}
		}
		if len(subjects) == 0 {
			return nil, usagef("%s needs --nats-stream-subjects (or HERALD_NATS_STREAM_SUBJECTS)", label("nats-create-stream"))
		}
		nc.CreateStream = &jetstream.StreamConfig{
			Name: *n.stream, Subjects: subjects, Storage: jetstream.FileStorage,
			// Republished events are dropped by id within this window.
			Duplicates:         2 * time.Minute,
			AllowAtomicPublish: *n.atomicBatches,
		}
		nc.NoStreamHint = func(subject string) string {
			return fmt.Sprintf("add %s to --nats-stream-subjects of stream %s, which captures %s",
				subject, *n.stream, strings.Join(subjects, ","))
		}
	case *n.subjects != "":
		return nil, usagef("%s is only used with --nats-create-stream", label("nats-stream-subjects"))
	default:
		nc.NoStreamHint = noStreamHint
	}
	return nc, nil
}

// noStreamHint is the fix the NATS publisher's warning names when no
// JetStream stream captures a subject and the command creates none: the
// flags that make one. The subject is named exactly: a wildcard would need
// quoting from the shell.
func noStreamHint(subject string) string {
	return fmt.Sprintf("pass --nats-create-stream NAME --nats-stream-subjects %s, or create a stream whose subjects include it", subject)
}

// topicList splits a comma-separated list of topics, refusing empty ones
// and control characters.
func topicList(label, raw string) ([]string, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var topics []string
	for _, t := range strings.Split(raw, ",") {
		t = strings.TrimSpace(t)
		if t == "" || strings.ContainsFunc(t, unicode.IsControl) {
			return nil, usagef("%s: %q is not a list of topics (comma-separated, none empty)", label, clean(raw))
		}
		topics = append(topics, t)
	}
	return topics, nil
}

var (
	streamName  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	natsSubject = regexp.MustCompile(`^[^.*>\s]+(\.[^.*>\s]+)*$`)
)

func setupRelay(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	dbs := repeatable(f, "db")
	names := f.String("databases", "", "comma-separated database `NAMES` to relay besides --db, each DSN read from "+
		"HERALD_DB_<NAME> or the file HERALD_DB_<NAME>_FILE names")
	r := addRelayFlags(f)
	source := addSourceFlags(f)
	dests := addDestinationFlags(f)
	return func(ctx context.Context, inv *invocation) error {
		// Every input is checked before anything connects.
		log, err := d.logger(inv)
		if err != nil {
			return err
		}
		srcs, named, err := databaseSources(inv, *dbs, *names)
		if err != nil {
			return err
		}
		var parsed []*database
		for _, src := range srcs {
			db, err := d.parseDatabase(inv, src)
			if err != nil {
				return err
			}
			if *r.claimRows {
				if db.names == nil {
					return usagef("%s: only a PostgreSQL outbox leases keys; the others always claim rows", inv.flags.label("claim-rows"))
				}
				db.names.ClaimRows = true
			}
			if err := setFairBy(inv, db, *r.fairBy); err != nil {
				return err
			}
			parsed = append(parsed, db)
		}
		cdc, err := source.config(inv, parsed)
		if err != nil {
			return err
		}
		plan, err := dests.parsePlan(inv, *r.publisher)
		if err != nil {
			return err
		}
		relayCfg, natsCfg, err := r.relayConfig(inv)
		if err != nil {
			return err
		}
		adminAddr, err := checkAdminAddr(inv, *r.adminAddr)
		if err != nil {
			return err
		}
		if err := noArgs(inv); err != nil {
			return err
		}
		fl := &fleet{inv: inv, log: log, named: named, owner: ownerName(), cdc: cdc,
			reached: make(chan struct{}), connected: make(chan struct{}), fatal: make(chan error, 1)}
		fl.status = &relayStatus{plan: plan}
		for i, src := range srcs {
			dl := log
			if named {
				dl = log.With("database", src.name)
			}
			cfg := *relayCfg
			cfg.Logger = dl
			cfg.MaxInFlightBytes = shareOf(relayCfg.MaxInFlightBytes, len(srcs))
			fl.dbs = append(fl.dbs, &dbRelay{name: src.name, db: parsed[i], log: dl, cfg: cfg, state: dbStopped})
		}
		fl.status.dbs = fl.dbs
		if len(srcs) > 1 {
			// Each database's relay has --max-in-flight publish calls of
			// its own at a routed destination.
			plan.slots = relayCfg.MaxInFlight * len(srcs)
		}
		if inv.checkOnly {
			return nil
		}
		return runRelay(ctx, fl, plan, natsCfg, relayCfg.PublishTimeout, *r.shutdownTimeout, adminAddr)
	}
}

// stopGrace is how long the relay waits, after a second signal cancelled
// its drain, for the in-flight rows to be released.
const stopGrace = 2 * time.Second

// runRelay relays every database of fl until ctx ends, then drains them.
// Each database waits for its server and starts on its own; the
// destinations are opened once, for all of them.
func runRelay(ctx context.Context, fl *fleet, plan *plan, natsCfg *heraldnats.Config,
	publishTimeout, shutdownTimeout time.Duration, adminAddr string) (err error) {
	inv, log := fl.inv, fl.log
	// After an abort the relays may still hold connections; pool.Close
	// would wait for them, and the process is exiting anyway.
	abandoned := false
	for _, d := range fl.dbs {
		if d.pool, d.store, err = d.db.open(ctx); err != nil {
			return err
		}
		defer func() {
			if !abandoned {
				d.pool.Close()
			}
		}()
	}

	// The admin server answers from the start, so that /readyz can say what
	// each database waits for.
	if adminAddr != "" {
		for i, d := range fl.dbs {
			cfg := &heraldprom.Config{Admin: d.store, Logger: d.log, DestinationOf: fl.status.destinationOf}
			if i == 0 {
				// The destinations' breakers and call times belong to the
				// process: one database's metrics carry them.
				cfg.Destinations = fl.status.breakers
			}
			if d.metrics, err = heraldprom.New(cfg); err != nil {
				return err
			}
			if pg, ok := d.store.(*heraldpg.Driver); ok {
				// The table's size, dead tuples and partitions.
				if err := d.metrics.Registry().Register(heraldpgprom.New(pg, 0)); err != nil {
					return err
				}
			}
			if fl.cdc != nil {
				// The slot's retained WAL, lag and wal_status.
				if err := registerSlotMetrics(d, fl.cdc); err != nil {
					return err
				}
			}
			d.cfg.Observer = d.metrics
		}
		plan.timed = fl.dbs[0].metrics.Publisher
		handler := fl.dbs[0].metrics.Handler()
		if fl.named {
			handler = promhttp.HandlerFor(labelledMetrics{fl.dbs}, promhttp.HandlerOpts{})
		}
		// The admin page at / shows the first database; with several
		// named ones, each has its page at /db/NAME/ too.
		admin, err := startAdmin(inv, log, adminAddr, handler, fl.status, fl.dbs[0].store, fl)
		if err != nil {
			return err
		}
		defer admin.stop()
	}

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	fl.ctx = runCtx
	fl.connect(func(ctx context.Context) (*destinations, error) {
		return plan.connect(ctx, starter{inv: inv, log: log, status: fl.status}, log, fl.owner, natsCfg, publishTimeout)
	})
	for _, d := range fl.dbs {
		_ = fl.start(d) // each is stopped: it starts
	}
	defer func() {
		cancelRun()
		if !abandoned {
			fl.wg.Wait()
		}
		if dests := fl.status.getDests(); dests != nil && !abandoned {
			dests.close()
		}
	}()

	select {
	case <-ctx.Done():
	case err := <-fl.fatal:
		cancelRun()
		if stopErr := fl.stopAll(context.Background()); stopErr != nil {
			log.Warn("stopping after a failure", "error", inv.stderr.scrub(stopErr.Error()))
		}
		return err
	}
	if !fl.anyRan() {
		_ = fl.stopAll(context.Background())
		log.Info("stopped before the relay started")
		fmt.Fprintln(inv.stdout, "relay stopped before it started")
		return nil
	}
	log.Info("shutting down: finishing in-flight batches; a second signal aborts", "shutdown_timeout", shutdownTimeout)
	stopCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- fl.stopAll(stopCtx) }()
	select {
	case err = <-stopped:
	case <-inv.abort:
		log.Warn("second signal: aborting; unconfirmed rows are released, or rescued when their lease expires")
		cancel()
		select {
		case <-stopped: //nolint:errcheck // the drain's error no longer matters: the operator asked to abort
		case <-time.After(stopGrace):
			abandoned = true
		}
		return errAborted
	}
	if err != nil {
		return err
	}
	fmt.Fprint(inv.stdout, fl.summary())
	return nil
}

// addFairByFlag is --fair-by, of the relay and of migrate (which creates
// the index it needs).
func addFairByFlag(f *flagSet) *string {
	return f.String("fair-by", "", "PostgreSQL: make claims fair between the values of `KEY`: topic, header:NAME or column:NAME "+
		"(a column of the outbox table), so that one value's backlog cannot hold back the others' events; "+
		"herald migrate --fair-by KEY creates the index it needs")
}

// setFairBy checks --fair-by and sets it on db's driver configuration.
func setFairBy(inv *invocation, db *database, by string) error {
	if by == "" {
		return nil
	}
	if db.names == nil {
		return usagef("%s: only a PostgreSQL outbox has fair claims; MySQL and SQLite claim keys in order", inv.flags.label("fair-by"))
	}
	if err := (&heraldpg.Config{FairBy: by}).Validate(); err != nil {
		return usagef("%s: %s", inv.flags.label("fair-by"), strings.TrimPrefix(err.Error(), "heraldpg: Config.FairBy "))
	}
	db.names.FairBy = by
	return nil
}
