// Package ent imitates the client that ent generates into a service.
package ent

import "context"

type Client struct{ User *UserClient }

type UserClient struct{}

func (c *UserClient) Create() *UserCreate { return &UserCreate{} }

type UserCreate struct{}

func (c *UserCreate) Save(ctx context.Context) error { return nil }

type Tx struct{ User *UserClient }

type CommitHook func()

type RollbackHook func()

func (c *Client) Tx(ctx context.Context) (*Tx, error) { return &Tx{}, nil }
func (tx *Tx) Commit() error                          { return nil }
func (tx *Tx) Rollback() error                        { return nil }
func (tx *Tx) OnCommit(f CommitHook)                  {}
func (tx *Tx) OnRollback(f RollbackHook)              {}
func (tx *Tx) Client() *Client                        { return nil }
