// Package nats is a stub of github.com/nats-io/nats.go.
package nats

import (
	"context"
	"time"
)

type Msg struct {
	Subject string
	Data    []byte
}

type Subscription struct{}

type PubAck struct{}

type PubOpt interface{}

type Conn struct{}

func (nc *Conn) Publish(subj string, data []byte) error { return nil }
func (nc *Conn) PublishMsg(m *Msg) error                { return nil }
func (nc *Conn) Request(subj string, data []byte, timeout time.Duration) (*Msg, error) {
	return nil, nil
}
func (nc *Conn) RequestWithContext(ctx context.Context, subj string, data []byte) (*Msg, error) {
	return nil, nil
}
func (nc *Conn) Subscribe(subj string, cb func(*Msg)) (*Subscription, error) { return nil, nil }
func (nc *Conn) Flush() error                                                { return nil }

// JetStream and JetStreamContext are the legacy JetStream API.
type JetStream interface {
	Publish(subj string, data []byte, opts ...PubOpt) (*PubAck, error)
	PublishMsg(m *Msg, opts ...PubOpt) (*PubAck, error)
}

type JetStreamContext interface {
	JetStream
}

func (nc *Conn) JetStream() (JetStreamContext, error) { return nil, nil }
