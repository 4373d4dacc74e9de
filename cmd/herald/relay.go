package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
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
	natsStream, natsSubjects, natsPrefix             *string
	natsMaxPending, natsMaxPendingBytes              *int
	maxInFlightBytes, claimConcurrency               *int
	natsAckTimeout                                   *time.Duration
	ordering, unorderedTopics, skipDeadTopics        *string
	maxPerKey                                        *int
	adminAddr                                        *string
	deleteOnPublish                                  *bool
}

func addRelayFlags(f *flagSet) *relayFlags {
	retry := herald.DefaultRetryPolicy()
	return &relayFlags{
		publisher: f.String("publisher", "", "the destination `URL` of every topic: nats://[user:password@]host:4222, kafka://host:9092 "+
			"or redis://[:password@]host:6379/0; a comma-separated list for a NATS or Kafka cluster (or use --destination)"),
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
		cleanupInterval: f.Duration("cleanup-interval", time.Minute, "every `duration`, delete the published rows past --retention"),
		shutdownTimeout: f.Duration("shutdown-timeout", 30*time.Second, "on the first SIGINT/SIGTERM, let in-flight batches finish for up to this `duration`"),
		natsStream:      f.String("nats-create-stream", "", "create or update the JetStream stream of this `name` at start; needs --nats-stream-subjects"),
		natsSubjects:    f.String("nats-stream-subjects", "", "comma-separated `subjects` the created stream captures, such as orders.>"),
		natsPrefix:      f.String("nats-subject-prefix", "", "`prefix` joined to every topic with a dot to make the subject"),
		natsMaxPending:  f.Int("nats-max-pending", 4096, "at most `N` messages await a PubAck"),
		natsMaxPendingBytes: f.Int("nats-max-pending-bytes", heraldnats.DefaultMaxPendingBytes,
			"at most `N` bytes of messages await a PubAck (one larger message is sent alone)"),
		natsAckTimeout: f.Duration("nats-ack-timeout", 30*time.Second, "a message waits this `duration` for its PubAck"),
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
		"max-attempts": *r.maxAttempts, "nats-max-pending": *r.natsMaxPending, "nats-max-pending-bytes": *r.natsMaxPendingBytes} {
		if v < 1 {
			return nil, nil, usagef("%s: %d is not positive", label(name), v)
		}
	}
	for name, v := range map[string]time.Duration{"lease": *r.lease, "publish-timeout": *r.publishTimeout,
		"poll-interval": *r.pollInterval, "idle-poll-interval": *r.idlePoll, "retry-cap": *r.retryCap,
		"max-age": *r.maxAge, "rescue-interval": *r.rescueInterval, "cleanup-interval": *r.cleanupInterval,
		"shutdown-timeout": *r.shutdownTimeout, "nats-ack-timeout": *r.natsAckTimeout} {
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
	nc := &heraldnats.Config{
		SubjectPrefix: *r.natsPrefix, MaxPending: *r.natsMaxPending, MaxPendingBytes: *r.natsMaxPendingBytes,
		AckTimeout: *r.natsAckTimeout,
	}
	if *r.natsPrefix != "" && !natsSubject.MatchString(*r.natsPrefix) {
		return nil, nil, usagef("%s: %q is not a subject prefix (tokens separated by dots, no wildcards)",
			label("nats-subject-prefix"), clean(*r.natsPrefix))
	}
	switch {
	case *r.natsStream != "":
		if !streamName.MatchString(*r.natsStream) {
			return nil, nil, usagef("%s: %q is not a stream name (letters, digits, - and _)",
				label("nats-create-stream"), clean(*r.natsStream))
		}
		var subjects []string
		for _, s := range strings.Split(*r.natsSubjects, ",") {
			if s = strings.TrimSpace(s); s != "" {
				subjects = append(subjects, s)
			}
		}
		if len(subjects) == 0 {
			return nil, nil, usagef("%s needs --nats-stream-subjects (or HERALD_NATS_STREAM_SUBJECTS)", label("nats-create-stream"))
		}
		nc.CreateStream = &jetstream.StreamConfig{
			Name: *r.natsStream, Subjects: subjects, Storage: jetstream.FileStorage,
			// Republished events are dropped by id within this window.
			Duplicates: 2 * time.Minute,
		}
	case *r.natsSubjects != "":
		return nil, nil, usagef("%s is only used with --nats-create-stream", label("nats-stream-subjects"))
	}
	return rc, nc, nil
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

// urlSecrets returns the password of u, or its user when it is a token.
func urlSecrets(u *url.URL) []string {
	if u.User == nil {
		return nil
	}
	if p, ok := u.User.Password(); ok {
		return []string{p}
	}
	return []string{u.User.Username()}
}

func setupRelay(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	r := addRelayFlags(f)
	dests := addDestinationFlags(f)
	return func(ctx context.Context, inv *invocation) error {
		// Every input is checked before anything connects.
		log, err := d.logger(inv)
		if err != nil {
			return err
		}
		db, err := d.parseDB(inv)
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
		return runRelay(ctx, inv, log, db, plan, relayCfg, natsCfg, *r.shutdownTimeout, adminAddr)
	}
}

// stopGrace is how long the relay waits, after a second signal cancelled
// its drain, for the in-flight rows to be released.
const stopGrace = 2 * time.Second

func runRelay(ctx context.Context, inv *invocation, log *slog.Logger, db *database, plan *plan,
	relayCfg *herald.RelayConfig, natsCfg *heraldnats.Config, shutdownTimeout time.Duration, adminAddr string) (err error) {
	if err := db.mustExist(inv); err != nil {
		return err
	}
	pool, store, err := db.open()
	if err != nil {
		return err
	}
	// After an abort the relay may still hold connections; pool.Close would
	// wait for them, and the process is exiting anyway.
	abandoned := false
	defer func() {
		if !abandoned {
			pool.Close()
		}
	}()

	// The admin server answers from the start, so that /readyz can say what
	// the relay waits for.
	status := &relayStatus{}
	var metrics *heraldprom.Metrics
	if adminAddr != "" {
		if metrics, err = heraldprom.New(&heraldprom.Config{Admin: store, Logger: log, Destinations: status.breakers}); err != nil {
			return err
		}
		relayCfg.Observer = metrics
		admin, err := startAdmin(inv, log, adminAddr, metrics, status, store)
		if err != nil {
			return err
		}
		defer admin.stop()
	}

	relay, dests, err := startRelay(ctx, starter{inv: inv, log: log, status: status}, log, db, pool, store, plan, relayCfg, natsCfg)
	if errors.Is(err, errStoppedStarting) {
		log.Info("stopped before the relay started")
		fmt.Fprintln(inv.stdout, "relay stopped before it started")
		return nil
	}
	if err != nil {
		return err
	}
	defer dests.close()
	status.started(relay, dests)
	if metrics != nil {
		metrics.Watch(relay)
	}
	log.Info("relaying", "table", store.Table(), "database", db.where, "destinations", plan.display())

	<-ctx.Done()
	log.Info("shutting down: finishing in-flight batches; a second signal aborts", "shutdown_timeout", shutdownTimeout)
	stopCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- relay.Stop(stopCtx) }()
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
	st := relay.Stats()
	fmt.Fprintf(inv.stdout, "relay stopped: %d published, %d retried, %d dead, %d released\n",
		st.Published, st.Retried, st.Dead, st.Released)
	return nil
}

// startRelay waits for the database and the destinations, each as long as
// it cannot be reached, then starts the relay. It returns
// errStoppedStarting when ctx ends first.
func startRelay(ctx context.Context, start starter, log *slog.Logger, db *database, pool closer, store outbox, plan *plan,
	relayCfg *herald.RelayConfig, natsCfg *heraldnats.Config) (*herald.Relay, *destinations, error) {
	err := start.wait(ctx, "database", func(ctx context.Context) error {
		if err := db.reach(ctx, pool); err != nil {
			return err
		}
		return store.Ping(ctx)
	})
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%s/%d", host, os.Getpid())
	dests, err := plan.connect(ctx, start, log, owner, natsCfg, relayCfg.PublishTimeout)
	if err != nil {
		return nil, nil, err
	}
	relayCfg.Store, relayCfg.Publisher, relayCfg.Logger, relayCfg.Owner = store, dests.pub, log, owner
	relay, err := herald.NewRelay(relayCfg)
	if err != nil {
		dests.close()
		return nil, nil, usagef("%s", err)
	}
	// Start checks the database again: it may have gone in between.
	if err := start.wait(ctx, "database", relay.Start); err != nil {
		dests.close()
		return nil, nil, err
	}
	return relay, dests, nil
}
