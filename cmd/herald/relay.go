package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

func cmdRelay(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	var c common
	f := newFlags("relay", getenv, stderr)
	c.register(f)
	d := herald.DefaultRetryPolicy()
	var (
		publisher       = f.String("publisher", "", "broker URL: nats://user:pass@host:4222 (env HERALD_PUBLISHER)")
		batchSize       = f.Int("batch-size", 1000, "events claimed, published and acknowledged together")
		maxInFlight     = f.Int("max-in-flight", 4, "batches publishing at once")
		lease           = f.Duration("lease", time.Minute, "how long a claim holds its rows")
		publishTimeout  = f.Duration("publish-timeout", 20*time.Second, "bound on one batch's publish")
		pollInterval    = f.Duration("poll-interval", 5*time.Millisecond, "wait after a partial batch")
		idlePoll        = f.Duration("idle-poll-interval", 250*time.Millisecond, "longest wait while the outbox is empty")
		retryBase       = f.Duration("retry-base", d.Base, "first retry delay")
		retryCap        = f.Duration("retry-cap", d.Cap, "longest retry delay")
		maxAttempts     = f.Int("max-attempts", d.MaxAttempts, "failed attempts before an event is dead")
		maxAge          = f.Duration("max-age", d.MaxAge, "age after which a failure makes an event dead")
		retention       = f.String("retention", "24h", `how long published rows are kept ("forever" keeps them)`)
		rescueInterval  = f.Duration("rescue-interval", 5*time.Second, "how often expired leases are rescued")
		cleanupInterval = f.Duration("cleanup-interval", time.Minute, "how often retention runs")
		shutdownTimeout = f.Duration("shutdown-timeout", 30*time.Second, "how long a first signal lets in-flight batches finish")
		natsStream      = f.String("nats-create-stream", "", "create or update this JetStream stream at start")
		natsSubjects    = f.String("nats-stream-subjects", "", "comma-separated subjects of --nats-create-stream")
	)
	if err := f.parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return usagef("relay takes no arguments")
	}
	for name, v := range map[string]time.Duration{"lease": *lease, "publish-timeout": *publishTimeout,
		"poll-interval": *pollInterval, "idle-poll-interval": *idlePoll, "retry-base": *retryBase,
		"retry-cap": *retryCap, "max-age": *maxAge, "rescue-interval": *rescueInterval,
		"cleanup-interval": *cleanupInterval, "shutdown-timeout": *shutdownTimeout} {
		if v <= 0 {
			return usagef("--%s must be positive", name)
		}
	}
	var keep time.Duration
	switch *retention {
	case "forever":
		keep = -1
	default:
		r, err := time.ParseDuration(*retention)
		if err != nil || r <= 0 {
			return usagef(`--retention: %q is not a positive duration or "forever"`, *retention)
		}
		keep = r
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	natsURL, err := parsePublisherURL(*publisher)
	if err != nil {
		return err
	}
	var stream *jetstream.StreamConfig
	if *natsStream != "" {
		if *natsSubjects == "" {
			return usagef("--nats-create-stream needs --nats-stream-subjects")
		}
		stream = &jetstream.StreamConfig{Name: *natsStream, Subjects: strings.Split(*natsSubjects, ","),
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}
	}

	relayCfg := &herald.RelayConfig{
		Logger: log, BatchSize: *batchSize, MaxInFlight: *maxInFlight, Lease: *lease,
		PublishTimeout: *publishTimeout, PollInterval: *pollInterval, IdlePollInterval: *idlePoll,
		Retry:          herald.RetryPolicy{Base: *retryBase, Cap: *retryCap, MaxAttempts: *maxAttempts, MaxAge: *maxAge},
		RescueInterval: *rescueInterval, Retention: keep, CleanupInterval: *cleanupInterval,
		// Placeholders so that the configuration is validated before
		// anything connects; replaced below.
		Store: placeholderStore{}, Publisher: herald.PublisherFunc(nil),
	}
	if _, err := herald.NewRelay(relayCfg); err != nil {
		return usagef("%s", strings.ReplaceAll(err.Error(), "herald: RelayConfig.", "--"))
	}

	ob, closeDB, err := openOutbox(ctx, &c)
	if err != nil {
		return err
	}
	defer closeDB()

	secret := passwordOf(*publisher)
	nc, err := nats.Connect(natsURL, nats.Name("herald-relay"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("cannot reach the broker at %s: %s", redactURL(natsURL), scrubSecret(err.Error(), secret))
	}
	defer nc.Close()
	pub, err := heraldnats.New(nc, &heraldnats.Config{CreateStream: stream, Logger: log})
	if err != nil {
		return fmt.Errorf("%s", scrubSecret(err.Error(), secret))
	}
	relayCfg.Store, relayCfg.Publisher = ob, pub
	relay, err := herald.NewRelay(relayCfg)
	if err != nil {
		return err
	}
	if err := relay.Start(ctx); err != nil {
		return err
	}
	log.Info("relaying", "publisher", redactURL(natsURL))
	<-ctx.Done()
	log.Info("signal received: draining in-flight batches", "deadline", *shutdownTimeout)
	stopCtx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	if err := relay.Stop(stopCtx); err != nil {
		return err
	}
	st := relay.Stats()
	fmt.Fprintf(stdout, "relay stopped: %d published, %d retried, %d dead, %d released\n",
		st.Published, st.Retried, st.Dead, st.Released)
	return nil
}

// parsePublisherURL checks --publisher: a nats:// (or tls://) URL with a
// host. The error never repeats the password.
func parsePublisherURL(raw string) (string, error) {
	if raw == "" {
		return "", usagef("--publisher is required (or HERALD_PUBLISHER): a nats://host:4222 URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", usagef("--publisher: not a URL: %s", scrubSecret(err.Error(), passwordOf(raw)))
	}
	switch u.Scheme {
	case "nats", "tls":
	default:
		return "", usagef("--publisher: scheme %q is not supported: use nats://", u.Scheme)
	}
	if u.Host == "" {
		return "", usagef("--publisher: %s has no host", redactURL(raw))
	}
	return raw, nil
}

// placeholderStore lets the relay's configuration be validated before the
// database is opened.
type placeholderStore struct{ herald.Store }
