package sqlstore

import (
	"errors"
	"fmt"
	"reflect"
)

// transaction is what tells a transaction from a pool or a connection,
// which have ExecContext too: only a transaction ends. Checking for a
// BeginTx method instead would miss pools whose BeginTx returns the ORM's
// own type (bun.DB, ent's Client), which an interface cannot name without
// importing the ORM.
type transaction interface {
	Commit() error
	Rollback() error
}

// CheckTx refuses a nil Execer, a typed nil inside one (a nil *sql.Tx would
// panic in ExecContext), and anything that is not a transaction.
func CheckTx(tx any) error {
	if tx == nil {
		return errors.New("tx is nil")
	}
	if v := reflect.ValueOf(tx); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("tx is a nil %T", tx)
	}
	if _, ok := tx.(transaction); !ok {
		return fmt.Errorf("%T is not a transaction (it has no Commit and Rollback): "+
			"an event written through it would commit on its own, outside the business transaction; "+
			"pass the transaction instead", tx)
	}
	return nil
}
