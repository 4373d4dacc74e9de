package ent

// The sql/execquery feature gives Client and Tx an ExecContext method,
// through which Herald's exec writers join an ent transaction.
//go:generate go run -mod=mod entgo.io/ent/cmd/ent generate --feature sql/execquery ./schema
