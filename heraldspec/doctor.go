package heraldspec

import (
	"context"
	"time"
)

// Severity is how much a Finding of a diagnosis matters.
type Severity string

// The severities of a Finding, worst first.
const (
	// SeverityError is a state that breaks relaying or grows without
	// bound: act on it.
	SeverityError Severity = "error"
	// SeverityWarning is a state that costs the relay, or will.
	SeverityWarning Severity = "warning"
	// SeverityOK is a check that found nothing wrong.
	SeverityOK Severity = "ok"
)

// Finding is one thing a diagnosis found (herald doctor prints one per
// line): how much it matters, which check found it, what it is (one line)
// and how to fix it (the SQL or command to run; empty when there is
// nothing to do).
type Finding struct {
	Severity Severity `json:"severity"`
	Check    string   `json:"check"`
	Message  string   `json:"message"`
	Fix      string   `json:"fix"`
}

// DiagnoseParams are what a Diagnoser checks its database against.
type DiagnoseParams struct {
	// Lease is the relay's lease: a transaction that holds back the
	// database's cleanup (PostgreSQL's xmin horizon, InnoDB's purge) for
	// longer is reported. Defaults to 1m.
	Lease time.Duration
	// CDC says the table is relayed by change-data-capture (--source
	// cdc), so that logical replication must be possible, and its slot
	// and publication must exist. PostgreSQL only. Defaults to false.
	CDC bool
	// Slot and Publication name the change-data-capture slot and
	// publication, as heraldcdc.Config does. Each defaults to the
	// outbox table's name.
	Slot, Publication string
	// Now is the relay's clock, compared with the database's. Defaults to
	// time.Now.
	Now func() time.Time
}

// Diagnoser is implemented by the stores whose database herald doctor can
// read (heraldpg, heraldmysql and heraldsqlite's Driver): Diagnose reads
// the database's settings and the outbox's state, without changing them,
// and returns what it finds, each finding with its fix. An error means the
// database could not be read; a missing table is a finding.
type Diagnoser interface {
	Diagnose(ctx context.Context, p DiagnoseParams) ([]Finding, error)
}

// TargetChecker is implemented by publishers that can tell, without
// creating anything, whether the broker holds what the events of a topic
// are sent to: a JetStream stream capturing the subject, a Kafka topic, a
// RabbitMQ queue or exchange, an SQS queue, an SNS or Pub/Sub topic.
//
// CheckTarget returns one Finding (its Check left for the caller to set):
// SeverityOK when the target exists, or when there is nothing the
// publisher can check (the message says which); SeverityError, with the
// fix, when it is missing. topic is a topic, or a route's pattern (a '*'
// for one dot-separated token, a final '>' for one or more); "" asks about
// the topics no route names, which a publisher whose target does not
// depend on the topic (an SQS queue) checks all the same. An error means
// the broker could not be asked.
type TargetChecker interface {
	CheckTarget(ctx context.Context, topic string) (Finding, error)
}
