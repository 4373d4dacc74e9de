// Package jetstream is a stub of github.com/nats-io/nats.go/jetstream.
package jetstream

import (
	"context"

	"github.com/nats-io/nats.go"
)

type (
	JetStream interface {
		Stream(ctx context.Context, name string) (Stream, error)
		Publisher
	}

	Publisher interface {
		Publish(ctx context.Context, subject string, payload []byte, opts ...PublishOpt) (*PubAck, error)
		PublishMsg(ctx context.Context, msg *nats.Msg, opts ...PublishOpt) (*PubAck, error)
		PublishAsync(subject string, payload []byte, opts ...PublishOpt) (PubAckFuture, error)
	}

	Stream       interface{}
	PubAck       struct{}
	PubAckFuture interface{}
	PublishOpt   func()
)

func New(nc *nats.Conn) (JetStream, error) { return nil, nil }
