package heraldnats

import (
	"context"
	"fmt"
	"strings"

	"github.com/herald-outbox/herald/heraldspec"
)

var _ heraldspec.TargetChecker = (*Publisher)(nil)

// CheckTarget reports whether a JetStream stream captures every subject
// the topic (or route pattern) is published to: the SubjectPrefix and the
// topic. It lists the streams ($JS.API.STREAM.LIST) and creates nothing.
// A subject no stream captures is an error, with the fix of
// Config.NoStreamHint; one that streams capture only in part, a warning.
// The topics no route names ("") cannot be checked: each needs a stream.
func (p *Publisher) CheckTarget(ctx context.Context, topic string) (heraldspec.Finding, error) {
	if topic == "" {
		return heraldspec.Finding{Severity: heraldspec.SeverityOK,
			Message: "not checked: each subject needs a JetStream stream capturing it, and these are not known ahead"}, nil
	}
	subj := p.prefix + topic
	var covering, partly []string
	streams := p.js.ListStreams(ctx)
	for info := range streams.Info() {
		for _, s := range info.Config.Subjects {
			switch {
			case subjectCovers(s, subj):
				covering = append(covering, info.Config.Name)
			case subjectsOverlap(s, subj):
				partly = append(partly, info.Config.Name)
			}
		}
	}
	if err := streams.Err(); err != nil {
		return heraldspec.Finding{}, fmt.Errorf("heraldnats: listing JetStream streams: %w", err)
	}
	switch {
	case len(covering) > 0:
		return heraldspec.Finding{Severity: heraldspec.SeverityOK,
			Message: fmt.Sprintf("JetStream stream %s captures subject %s", strings.Join(covering, ", "), subj)}, nil
	case len(partly) > 0:
		return heraldspec.Finding{Severity: heraldspec.SeverityWarning,
			Message: fmt.Sprintf("JetStream stream %s captures only part of subject %s: the events of the rest are retried until a stream captures them",
				strings.Join(partly, ", "), subj),
			Fix: p.noStreamHint(subj)}, nil
	}
	return heraldspec.Finding{Severity: heraldspec.SeverityError,
		Message: fmt.Sprintf("no JetStream stream captures subject %s: its events are retried until one does", subj),
		Fix:     p.noStreamHint(subj)}, nil
}

// subjectCovers reports whether every subject that pattern matches,
// filter matches too ('*' one token, a final '>' one or more).
func subjectCovers(filter, pattern string) bool {
	ft, pt := strings.Split(filter, "."), strings.Split(pattern, ".")
	for i, f := range ft {
		if f == ">" {
			return i < len(pt)
		}
		switch {
		case i >= len(pt), pt[i] == ">":
			return false
		case f == "*":
		case pt[i] == "*" || f != pt[i]:
			return false
		}
	}
	return len(ft) == len(pt)
}

// subjectsOverlap reports whether some subject matches both a and b.
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		if i == len(at) || i == len(bt) {
			return len(at) == len(bt)
		}
		x, y := at[i], bt[i]
		switch {
		case x == ">" || y == ">":
			return true
		case x != "*" && y != "*" && x != y:
			return false
		}
	}
}
