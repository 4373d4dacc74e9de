// Package gorm is a stub of gorm.io/gorm.
package gorm

import "database/sql"

type DB struct{ Error error }

func (db *DB) Transaction(fc func(tx *DB) error, opts ...*sql.TxOptions) error { return nil }
func (db *DB) Begin(opts ...*sql.TxOptions) *DB                                { return db }
func (db *DB) Commit() *DB                                                     { return db }
func (db *DB) Create(value any) *DB                                            { return db }
