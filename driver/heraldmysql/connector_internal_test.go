package heraldmysql

import (
	"context"
	"database/sql/driver"
	"io"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// fakeConn is a connection whose server's read_only the test sets, and
// whose statements fail with execErr.
type fakeConn struct {
	driver.Conn
	readOnly bool
	asked    int // reads of read_only
	execErr  error
}

func (c *fakeConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	c.asked++
	v := "0"
	if c.readOnly {
		v = "1"
	}
	return &oneRow{v: []byte(v)}, nil
}

func (c *fakeConn) ExecContext(context.Context, string, []driver.NamedValue) (driver.Result, error) {
	return driver.RowsAffected(0), c.execErr
}

type oneRow struct {
	v    []byte
	done bool
}

func (r *oneRow) Columns() []string { return []string{"@@global.read_only"} }
func (r *oneRow) Close() error      { return nil }
func (r *oneRow) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done, dest[0] = true, r.v
	return nil
}

// A connection back from the pool reads read_only once a second, or at
// once after a statement failed as on a read-only server; a server that
// turned read-only loses it.
func TestWritableConnRechecksReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := &fakeConn{}
	c := &writableConn{conn: fake, checked: time.Now()}
	require.NoError(t, c.ResetSession(ctx))
	require.Zero(t, fake.asked, "checked less than a second ago")

	fake.execErr = &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
	_, err := c.ExecContext(ctx, "INSERT", nil)
	require.Error(t, err)
	require.NoError(t, c.ResetSession(ctx))
	require.Zero(t, fake.asked, "an error of another kind")

	fake.execErr = &mysql.MySQLError{Number: erOptionPreventsStatement,
		Message: "The MariaDB server is running with the --read-only option so it cannot execute this statement"}
	_, err = c.ExecContext(ctx, "INSERT", nil)
	require.Error(t, err)
	require.NoError(t, c.ResetSession(ctx), "the server takes writes again")
	require.Equal(t, 1, fake.asked)
	require.True(t, c.IsValid())
	require.NoError(t, c.ResetSession(ctx))
	require.Equal(t, 1, fake.asked, "checked just now")

	c.checked = time.Now().Add(-readOnlyRecheck)
	fake.readOnly = true
	require.ErrorIs(t, c.ResetSession(ctx), driver.ErrBadConn)
	require.Equal(t, 2, fake.asked)
	require.False(t, c.IsValid(), "the pool drops it")
}
