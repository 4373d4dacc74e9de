package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
)

// The event every producer shape writes, and the rows drain loads: the
// fields of a typical domain event with a payload of payloadSize bytes.
const (
	payloadSize   = 200
	eventType     = "order.placed"
	aggregateType = "order"
	headersJSON   = `{"source":"herald-bench"}`
)

var eventHeaders = map[string]string{"source": "herald-bench"}

// payload returns an order's JSON body, padded to payloadSize bytes.
func payload(orderID int64, customer string) []byte {
	return paddedPayload(orderID, customer, payloadSize)
}

// paddedPayload returns an order's JSON body padded to size bytes (or
// unpadded, when size is below its fields' length).
func paddedPayload(orderID int64, customer string, size int) []byte {
	b := make([]byte, 0, size)
	b = append(b, `{"order_id":`...)
	b = strconv.AppendInt(b, orderID, 10)
	b = append(b, `,"customer":"`...)
	b = append(b, customer...)
	b = append(b, `","status":"placed","pad":"`...)
	for len(b) < size-2 {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

// ShapeResult is one producer shape's throughput.
type ShapeResult struct {
	Name         string    `json:"name"`
	Description  string    `json:"description"`
	Transactions int64     `json:"transactions"`
	Seconds      float64   `json:"seconds"`
	TxPerSec     float64   `json:"tx_per_sec"`
	RoundsTxSec  []float64 `json:"rounds_tx_per_sec"`
}

// ProducersResult compares producer transaction rates.
type ProducersResult struct {
	Producers     int           `json:"producers"`
	Rounds        int           `json:"rounds"`
	Shapes        []ShapeResult `json:"shapes"`
	WriteTxRatio  float64       `json:"writetx_vs_insert_ratio"`
	WriteTxTarget float64       `json:"writetx_vs_insert_target"`
	WriteTxMet    bool          `json:"writetx_target_met"`
	NotifyRatio   float64       `json:"notify_vs_insert_ratio"`
	// EmitRatio (--cdc): WriteTx with EmitMessages, which writes no row,
	// against WriteTx on the same streamed table.
	EmitRatio float64 `json:"emit_vs_streamed_writetx_ratio,omitempty"`
}

type shape struct {
	name, desc string
	// streamed: the table's inserts default to streamed while it runs,
	// as under a change-data-capture relay.
	streamed bool
	// extra runs after the business insert, in the same transaction.
	extra func(ctx context.Context, tx pgx.Tx, orderID int64, customer string) error
}

func producerShapes(e *env, w, emit *herald.Writer[pgx.Tx]) []shape {
	handSQL := `INSERT INTO ` + e.outbox + ` (id, topic, key, type, aggregate_type, aggregate_id, payload, headers)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
	hand := func(ctx context.Context, tx pgx.Tx, orderID int64, customer string) error {
		aggID := strconv.FormatInt(orderID, 10)
		_, err := tx.Exec(ctx, handSQL, herald.NewID(), drainSubject, aggID, eventType, aggregateType, aggID,
			payload(orderID, customer), headersJSON)
		return err
	}
	writeTx := func(w *herald.Writer[pgx.Tx]) func(ctx context.Context, tx pgx.Tx, orderID int64, customer string) error {
		return func(ctx context.Context, tx pgx.Tx, orderID int64, customer string) error {
			aggID := strconv.FormatInt(orderID, 10)
			return w.WriteTx(ctx, tx, herald.Message{
				Topic: drainSubject, Type: eventType, AggregateType: aggregateType, AggregateID: aggID,
				Payload: payload(orderID, customer), Headers: eventHeaders,
			})
		}
	}
	shapes := []shape{
		{name: "business_only", desc: "business insert only"},
		{name: "hand_insert", desc: "+ hand-written outbox INSERT", extra: hand},
		{name: "writetx", desc: "+ heraldpg WriteTx", extra: writeTx(w)},
		{name: "hand_insert_notify", desc: "+ hand-written INSERT + pg_notify", extra: func(ctx context.Context, tx pgx.Tx, orderID int64, customer string) error {
			if err := hand(ctx, tx, orderID, customer); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT pg_notify('herald', '')`)
			return err
		}},
	}
	if emit != nil {
		shapes = append(shapes,
			shape{name: "writetx_streamed", desc: "+ WriteTx, streamed table (cdc)", streamed: true, extra: writeTx(w)},
			shape{name: "writetx_emit", desc: "+ WriteTx EmitMessages, no row (cdc)", streamed: true, extra: writeTx(emit)})
	}
	return shapes
}

func runProducers(ctx context.Context, e *env, out io.Writer) (*ProducersResult, error) {
	o := e.o
	fmt.Fprintf(out, "\nproducers: %d concurrent producers, %s per shape, %d round(s)\n", o.producers, o.duration, o.rounds)
	w, err := heraldpg.NewWriter(e.pgCfg)
	if err != nil {
		return nil, err
	}
	// --cdc: the two write modes of a table relayed by change-data-capture,
	// a row kept as history and a logical decoding message, on the table
	// with its inserts streamed while they run (no slot reads them: the
	// producers' cost alone).
	var emit *herald.Writer[pgx.Tx]
	var d *heraldpg.Driver
	if o.cdc {
		cfg := *e.pgCfg
		cfg.EmitMessages = true
		if emit, err = heraldpg.NewWriter(&cfg); err != nil {
			return nil, err
		}
		if d, err = e.newDriver(e.admin); err != nil {
			return nil, err
		}
		defer func() {
			if err := d.StreamInserts(context.WithoutCancel(ctx), false); err != nil {
				fmt.Fprintf(out, "  making the table's inserts ready again: %v\n", err)
			}
		}()
	}
	pool, err := e.newPool(ctx, o.producers)
	if err != nil {
		return nil, err
	}
	defer e.closePool(pool)

	shapes := producerShapes(e, w, emit)
	res := &ProducersResult{Producers: o.producers, Rounds: o.rounds, Shapes: make([]ShapeResult, len(shapes)),
		WriteTxTarget: targetWriteTxRatio}
	for i, s := range shapes {
		res.Shapes[i] = ShapeResult{Name: s.name, Description: s.desc}
	}
	var orderID atomic.Int64
	for round := range o.rounds {
		// Each round starts one shape later, so that no shape always runs
		// first or last while the machine drifts.
		for k := range shapes {
			i := (k + round) % len(shapes)
			if err := e.truncate(ctx); err != nil {
				return res, err
			}
			if d != nil {
				if err := d.StreamInserts(ctx, shapes[i].streamed); err != nil {
					return res, fmt.Errorf("%s: switching the table's inserts: %w", shapes[i].name, err)
				}
			}
			e.checkpoint(ctx)
			n, secs, err := measureShape(ctx, pool, e.orders, shapes[i], o.producers, o.duration, &orderID)
			if err != nil {
				return res, fmt.Errorf("%s: %w", shapes[i].name, err)
			}
			sr := &res.Shapes[i]
			sr.Transactions += n
			sr.Seconds += secs
			sr.RoundsTxSec = append(sr.RoundsTxSec, round2(float64(n)/secs))
		}
	}
	if err := e.truncate(ctx); err != nil {
		return res, err
	}
	for i := range res.Shapes {
		s := &res.Shapes[i]
		s.TxPerSec = round2(float64(s.Transactions) / s.Seconds)
		s.Seconds = round(s.Seconds, 3)
	}
	hand, wtx, notify := res.Shapes[1].TxPerSec, res.Shapes[2].TxPerSec, res.Shapes[3].TxPerSec
	if hand > 0 {
		res.WriteTxRatio = round(wtx/hand, 4)
		res.NotifyRatio = round(notify/hand, 4)
	}
	res.WriteTxMet = res.WriteTxRatio >= targetWriteTxRatio
	if len(res.Shapes) == 6 && res.Shapes[4].TxPerSec > 0 {
		res.EmitRatio = round(res.Shapes[5].TxPerSec/res.Shapes[4].TxPerSec, 4)
	}
	for i, s := range res.Shapes {
		fmt.Fprintf(out, "  %-36s %8s tx/s", s.Description, fmtRate(s.TxPerSec))
		switch i {
		case 2:
			fmt.Fprintf(out, "   %.3f of hand-written INSERT (target >= %.2f): %s", res.WriteTxRatio, targetWriteTxRatio, verdict(res.WriteTxMet))
		case 3:
			fmt.Fprintf(out, "   %.3f of hand-written INSERT: the cost of NOTIFY in the producer's transaction", res.NotifyRatio)
		case 5:
			fmt.Fprintf(out, "   %.3f of WriteTx on the streamed table", res.EmitRatio)
		}
		if len(s.RoundsTxSec) > 1 {
			fmt.Fprintf(out, "   rounds %v", s.RoundsTxSec)
		}
		fmt.Fprintln(out)
	}
	return res, nil
}

// measureShape runs producers transactions of shape s back to back for a
// short warm-up and then duration, and counts those that committed inside
// the measured window.
func measureShape(ctx context.Context, pool *pgxpool.Pool, orders string, s shape, producers int,
	duration time.Duration, orderID *atomic.Int64) (int64, float64, error) {
	insertOrder := `INSERT INTO ` + orders + ` (id, customer_id, amount_cents, status) VALUES ($1, $2, $3, 'placed')`
	warm := min(duration/10, time.Second)
	start := time.Now()
	from, to := start.Add(warm), start.Add(warm+duration)

	var (
		count    atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil && time.Now().Before(to) {
				id := orderID.Add(1)
				customer := "customer-" + strconv.Itoa(int(id)%1000)
				err := pgx.BeginFunc(runCtx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(runCtx, insertOrder, id, customer, int64(p)*100+id%100); err != nil {
						return err
					}
					if s.extra != nil {
						return s.extra(runCtx, tx, id, customer)
					}
					return nil
				})
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				if now := time.Now(); !now.Before(from) && now.Before(to) {
					count.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	return count.Load(), duration.Seconds(), nil
}

func round2(v float64) float64 { return round(v, 2) }
