package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/herald-outbox/herald/heraldspec"
)

// The relay's waits for its database and destinations at start: doubling
// from startRetryBase up to startRetryCap between two tries.
const (
	startRetryBase = 250 * time.Millisecond
	startRetryCap  = 15 * time.Second
)

// errStoppedStarting is returned when a signal stopped the relay while it
// still waited for its database or a destination.
var errStoppedStarting = errors.New("stopped before the relay started")

// unreachableError is a destination that could not be reached (refused,
// timed out, down): the relay waits for it at start.
type unreachableError struct{ msg string }

func (e *unreachableError) Error() string { return e.msg }

// starter waits for what the relay needs at start, logging each failed try
// and telling the admin server what it waits for.
type starter struct {
	inv    *invocation
	log    *slog.Logger
	status waiter
	// once makes wait try once: a command that is not a daemon (replay)
	// reports an unreachable service instead of waiting for it.
	once bool
}

// waiter hears what a start waits for: a database's relay
// (dbRelay), the destinations (relayStatus).
type waiter interface{ waiting(what, why string) }

// wait calls try until it succeeds, returning nil; until it fails with an
// error that is not a service being unreachable (bad configuration,
// refused credentials, an outbox table at another version), returning
// that error; or until ctx ends, returning errStoppedStarting. what names
// the service for the logs and /readyz: "database" or "destination NAME".
func (s starter) wait(ctx context.Context, what string, try func(context.Context) error) error {
	delay := startRetryBase
	for attempt := 1; ; attempt++ {
		err := try(ctx)
		if err == nil {
			s.status.waiting("", "")
			return nil
		}
		if ctx.Err() != nil {
			return errStoppedStarting
		}
		if !isUnreachable(err) || s.once {
			return err
		}
		msg := s.inv.stderr.scrub(err.Error())
		s.status.waiting(what, msg)
		s.log.Warn("waiting for the "+what+" before relaying", "error", msg, "attempt", attempt, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return errStoppedStarting
		case <-t.C:
		}
		delay = min(delay*2, startRetryCap)
	}
}

// isUnreachable reports whether err says a database or destination cannot
// be reached now, rather than that it refused the configuration.
func isUnreachable(err error) bool {
	var (
		ue      *usageError
		down    *unreachableError
		dbErr   *heraldspec.DatabaseOpenError
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
		netErr  net.Error
	)
	switch {
	case errors.As(err, &ue):
		return false
	case errors.As(err, &down):
		return true
	case errors.As(err, &dbErr):
		// The database's driver told.
		return dbErr.Unreachable
	case errors.As(err, &pgErr):
		// The server answered. Only these classes pass: connection
		// exception (08), insufficient resources such as too many
		// connections (53), operator intervention such as starting up or
		// shutting down (57). A refused login (28) or an unknown database
		// (3D) is configuration.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53") ||
			strings.HasPrefix(pgErr.Code, "57")
	}
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
