package heraldrabbit_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

// The errors of a failed dial read without the password, yet are still
// the client's underneath, so that a program can tell credentials the
// broker refused (ACCESS_REFUSED) from a broker that is down.
func TestDialErrorsKeepTheClientsErrorBehindTheirScrubbedText(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	adminConn(t) // skips without RabbitMQ
	const password = "n0t-The-Passw0rd"
	dial, err := heraldrabbit.Dialer("amqp://guest:"+password+"@127.0.0.1:5672/", amqp.Config{})
	require.NoError(t, err)
	_, err = dial(t.Context())
	require.Error(t, err)
	var refused *amqp.Error
	require.ErrorAs(t, err, &refused)
	require.Equal(t, amqp.AccessRefused, refused.Code)

	p, err := heraldrabbit.New(dial, &heraldrabbit.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ReconnectMinDelay: time.Millisecond})
	require.NoError(t, err)
	defer p.Close()
	err = p.Connect(t.Context())
	require.ErrorAs(t, err, &refused, "Connect's error wraps the dial's")
	require.Equal(t, amqp.AccessRefused, refused.Code)
	for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", errors.Unwrap(err))} {
		require.NotContains(t, text, password)
	}
}

// A dial of a cluster's nodes skips a node that is down, and the next dial
// starts with the node after the one it connected to; with every node
// down it fails with each node's error, without the password.
func TestClusterDialerTriesTheNodesInTurn(t *testing.T) {
	t.Parallel()
	adminConn(t) // skips without RabbitMQ
	px := startProxy(t)
	dial, err := heraldrabbit.ClusterDialer([]string{
		"amqp://guest:guest@127.0.0.1:1/", // nothing listens on port 1
		brokerURL,
		"amqp://guest:guest@" + px.addr + "/",
	}, amqp.Config{})
	require.NoError(t, err)
	var got []string
	for range 3 {
		conn, err := dial(t.Context())
		require.NoError(t, err)
		got = append(got, conn.RemoteAddr().String())
		require.NoError(t, conn.Close())
	}
	require.Equal(t, []string{"127.0.0.1:5672", px.addr, "127.0.0.1:5672"}, got)

	const password = "n0t-The-Passw0rd"
	dial, err = heraldrabbit.ClusterDialer([]string{
		"amqp://guest:" + password + "@127.0.0.1:1/",
		"amqp://guest:" + password + "@127.0.0.1:2/",
	}, amqp.Config{})
	require.NoError(t, err)
	_, err = dial(t.Context())
	require.ErrorContains(t, err, "dialing amqp://guest@127.0.0.1:1/: ")
	require.ErrorContains(t, err, "; dialing amqp://guest@127.0.0.1:2/: ")
	require.NotContains(t, err.Error(), password)

	_, err = heraldrabbit.ClusterDialer(nil, amqp.Config{})
	require.EqualError(t, err, "heraldrabbit: no AMQP URI")
}
