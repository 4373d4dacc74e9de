// Package kafka is a stub of github.com/segmentio/kafka-go.
package kafka

import "context"

type Message struct{ Value []byte }

type Writer struct{}

func (w *Writer) WriteMessages(ctx context.Context, msgs ...Message) error { return nil }
