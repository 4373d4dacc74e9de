package heraldrabbit_test

import (
	"context"
	"log/slog"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

func TestCheckTargetPassivelyDeclaresTheExchangeOrQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	t.Run("NamedExchange", func(t *testing.T) {
		var checker heraldspec.TargetChecker = b.publisher(t, nil)
		f, err := checker.CheckTarget(ctx, "orders")
		require.NoError(t, err)
		require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
		require.Equal(t, "exchange "+b.exchange+" exists (which queues its bindings route the events to is not checked)", f.Message)

		missing := b.prefix + "missing"
		checker = b.publisher(t, &heraldrabbit.Config{Exchange: missing})
		for range 2 { // the publisher's own channels outlive the check
			f, err = checker.CheckTarget(ctx, "orders")
			require.NoError(t, err)
			require.Equal(t, heraldspec.SeverityError, f.Severity, f)
			require.Equal(t, "exchange "+missing+" does not exist: every event sent to it fails until it does", f.Message)
			require.Contains(t, f.Fix, "rabbitmqadmin declare exchange name="+missing+" ")
		}
		b.do(t, func(ch *amqp.Channel) error {
			err := ch.ExchangeDeclarePassive(missing, amqp.ExchangeDirect, false, false, false, false, nil)
			require.Error(t, err, "CheckTarget created the exchange")
			return nil
		})
	})

	t.Run("DefaultExchange", func(t *testing.T) {
		p, err := heraldrabbit.New(dialer(t, brokerURL, amqp.Config{}), &heraldrabbit.Config{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		present, missing := b.prefix+"orders", b.prefix+"refunds"
		b.do(t, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(present, false, false, false, false, nil)
			return err
		})
		t.Cleanup(func() {
			b.do(t, func(ch *amqp.Channel) error { _, err := ch.QueueDelete(present, false, false, false); return err })
		})
		f, err := p.CheckTarget(ctx, present)
		require.NoError(t, err)
		require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
		require.Equal(t, "queue "+present+" exists (0 messages ready)", f.Message)

		f, err = p.CheckTarget(ctx, missing)
		require.NoError(t, err)
		require.Equal(t, heraldspec.SeverityError, f.Severity, f)
		require.Contains(t, f.Message, "no queue "+missing+": the default exchange routes the events of topic "+missing+" nowhere")
		require.Equal(t, "rabbitmqadmin declare queue name="+missing+" durable=true", f.Fix)

		for _, topic := range []string{"", "orders.*"} {
			f, err = p.CheckTarget(ctx, topic)
			require.NoError(t, err)
			require.Equal(t, heraldspec.SeverityOK, f.Severity)
			require.Contains(t, f.Message, "not checked")
		}
	})
}
