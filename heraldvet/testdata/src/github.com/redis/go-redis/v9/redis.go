// Package redis is a stub of github.com/redis/go-redis/v9, declared the way
// the real one is: commands on an unexported type that clients embed, and
// again in interfaces.
package redis

import "context"

type XAddArgs struct {
	Stream string
	Values any
}

type StringCmd struct{}

func (c *StringCmd) Err() error { return nil }

type IntCmd struct{}

func (c *IntCmd) Err() error { return nil }

type cmdable func(ctx context.Context, cmd any) error

func (c cmdable) XAdd(ctx context.Context, a *XAddArgs) *StringCmd                 { return nil }
func (c cmdable) Publish(ctx context.Context, channel string, message any) *IntCmd { return nil }
func (c cmdable) Get(ctx context.Context, key string) *StringCmd                   { return nil }

type Client struct{ cmdable }

type StreamCmdable interface {
	XAdd(ctx context.Context, a *XAddArgs) *StringCmd
}

type Cmdable interface {
	StreamCmdable
	Publish(ctx context.Context, channel string, message any) *IntCmd
	Get(ctx context.Context, key string) *StringCmd
}

type UniversalClient interface {
	Cmdable
}
