package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
)

// Limits on a request. The caps on quantity and price keep every total far
// from overflowing an int64: 50 × 1e6 × 1e9 = 5e16.
const (
	maxBodyBytes   = 1 << 20
	maxCustomerLen = 100 // characters
	maxSKULen      = 64  // characters
	maxItems       = 50
	maxQuantity    = 1_000_000
	maxPriceCents  = 1_000_000_000
)

// identifier is the pattern a schema name must match before it is put into
// SQL; heraldpg and heraldinbox enforce the same one.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// The event this service publishes.
const (
	topicOrderPlaced = "orders.placed"
	typeOrderPlaced  = "order.placed"
)

type item struct {
	SKU        string `json:"sku"`
	Quantity   int64  `json:"quantity"`
	PriceCents int64  `json:"price_cents"`
}

// orderPlaced is the payload of an order.placed event. The JSON is the
// contract with consumers, who decode it into types of their own: services
// share events, not code.
type orderPlaced struct {
	ID         string    `json:"id"`
	Customer   string    `json:"customer"`
	Items      []item    `json:"items"`
	TotalCents int64     `json:"total_cents"`
	CreatedAt  time.Time `json:"created_at"`
}

type placeOrderResponse struct {
	ID         string `json:"id"`
	TotalCents int64  `json:"total_cents"`
}

// migrate creates the service's own table. The outbox table is heraldpg's.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if !identifier.MatchString(schema) {
		return fmt.Errorf("schema %q must match %s", schema, identifier)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// CREATE ... IF NOT EXISTS can still fail when two sessions run it
		// at the same moment; the lock, shared with billing, serialises them.
		for _, s := range []string{
			`SELECT pg_advisory_xact_lock(hashtext('orderflow:` + schema + `'))`,
			`CREATE SCHEMA IF NOT EXISTS "` + schema + `"`,
			`CREATE TABLE IF NOT EXISTS "` + schema + `".orders (
				id          uuid        PRIMARY KEY,
				customer    text        NOT NULL,
				total_cents bigint      NOT NULL CHECK (total_cents >= 0),
				created_at  timestamptz NOT NULL DEFAULT now())`,
		} {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrating the orders table: %w", err)
	}
	return nil
}

// server handles the order API.
type server struct {
	pool        *pgxpool.Pool
	outbox      *herald.Writer[pgx.Tx]
	insertOrder string
	log         *slog.Logger
}

// newServer returns the HTTP handler of the service: POST /orders. The
// tables must exist (migrate, heraldpg's Migrate).
func newServer(pool *pgxpool.Pool, schema string, log *slog.Logger) (http.Handler, error) {
	if !identifier.MatchString(schema) {
		return nil, fmt.Errorf("schema %q must match %s", schema, identifier)
	}
	outbox, err := heraldpg.NewWriter(&heraldpg.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	s := &server{
		pool:   pool,
		outbox: outbox,
		insertOrder: `INSERT INTO "` + schema + `".orders (id, customer, total_cents)
			VALUES ($1, $2, $3) RETURNING created_at`,
		log: log,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/orders", s.placeOrder)
	return mux, nil
}

func (s *server) placeOrder(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed: use POST", r.Method))
		return
	}
	req, reqErr := decodeRequest(w, r)
	if reqErr != nil {
		writeError(w, reqErr.status, reqErr.msg)
		return
	}

	ev := orderPlaced{ID: uuid.NewString(), Customer: req.Customer, Items: req.Items}
	for _, it := range req.Items {
		ev.TotalCents += it.Quantity * it.PriceCents
	}
	// The order row and its event commit together or not at all: if the
	// outbox write fails, the order is rolled back too, and the client
	// gets a 500 for an order that does not exist.
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(r.Context(), s.insertOrder, ev.ID, ev.Customer, ev.TotalCents).Scan(&ev.CreatedAt); err != nil {
			return fmt.Errorf("inserting the order: %w", err)
		}
		payload, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		return s.outbox.WriteTx(r.Context(), tx, herald.Message{
			Topic:         topicOrderPlaced,
			Type:          typeOrderPlaced,
			AggregateType: "order",
			AggregateID:   ev.ID,
			Payload:       payload,
		})
	})
	if err != nil {
		s.log.Error("placing an order failed", "err", err)
		writeError(w, http.StatusInternalServerError, "internal error: the order was not placed")
		return
	}
	s.log.Info("order placed", "order_id", ev.ID, "total_cents", ev.TotalCents, "items", len(ev.Items))
	writeJSON(w, http.StatusCreated, placeOrderResponse{ID: ev.ID, TotalCents: ev.TotalCents})
}

type placeOrderRequest struct {
	Customer string
	Items    []item
}

// requestError is a client error: its message is safe to send back.
type requestError struct {
	status int
	msg    string
}

func badRequest(format string, args ...any) *requestError {
	return &requestError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// decodeRequest reads and validates a request body: exactly one JSON object
// of at most maxBodyBytes, without unknown fields. Its errors name the
// field, with the item's index: "items[2].quantity: must be greater than 0".
func decodeRequest(w http.ResponseWriter, r *http.Request) (placeOrderRequest, *requestError) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	// Items are decoded one by one so that an error can say which item:
	// encoding/json's own error paths have no array indices.
	var top struct {
		Customer string            `json:"customer"`
		Items    []json.RawMessage `json:"items"`
	}
	if err := dec.Decode(&top); err != nil {
		return placeOrderRequest{}, decodeError("", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return placeOrderRequest{}, decodeError("", err)
		}
		return placeOrderRequest{}, badRequest("unexpected data after the JSON object")
	}

	req := placeOrderRequest{Customer: top.Customer}
	switch n := utf8.RuneCountInString(req.Customer); {
	case strings.TrimSpace(req.Customer) == "":
		return req, badRequest("customer: required")
	case n > maxCustomerLen:
		return req, badRequest("customer: %d characters is over the limit of %d", n, maxCustomerLen)
	case hasControl(req.Customer):
		return req, badRequest("customer: contains a control character")
	}
	switch n := len(top.Items); {
	case n == 0:
		return req, badRequest("items: at least one item is required")
	case n > maxItems:
		return req, badRequest("items: %d items is over the limit of %d", n, maxItems)
	}
	for i, raw := range top.Items {
		field := fmt.Sprintf("items[%d]", i)
		d := json.NewDecoder(strings.NewReader(string(raw)))
		d.DisallowUnknownFields()
		var it item
		if err := d.Decode(&it); err != nil {
			return req, decodeError(field, err)
		}
		switch n := utf8.RuneCountInString(it.SKU); {
		case strings.TrimSpace(it.SKU) == "":
			return req, badRequest("%s.sku: required", field)
		case n > maxSKULen:
			return req, badRequest("%s.sku: %d characters is over the limit of %d", field, n, maxSKULen)
		case hasControl(it.SKU):
			return req, badRequest("%s.sku: contains a control character", field)
		}
		switch {
		case it.Quantity <= 0:
			return req, badRequest("%s.quantity: must be greater than 0", field)
		case it.Quantity > maxQuantity:
			return req, badRequest("%s.quantity: must be at most %d", field, maxQuantity)
		case it.PriceCents < 0:
			return req, badRequest("%s.price_cents: must not be negative", field)
		case it.PriceCents > maxPriceCents:
			return req, badRequest("%s.price_cents: must be at most %d", field, maxPriceCents)
		}
		req.Items = append(req.Items, it)
	}
	return req, nil
}

// decodeError turns an encoding/json error into a client error naming the
// field; prefix is the path of the value being decoded ("" for the body).
func decodeError(prefix string, err error) *requestError {
	var (
		tooLarge  *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	where := "request body"
	if prefix != "" {
		where = prefix
	}
	switch {
	case errors.As(err, &tooLarge):
		return &requestError{http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body is over the limit of %d bytes", tooLarge.Limit)}
	case errors.Is(err, io.EOF):
		return badRequest("request body is empty: send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syntaxErr):
		return badRequest("malformed JSON at byte %d: %s", syntaxErr.Offset, syntaxErr.Error())
	case errors.As(err, &typeErr):
		field := typeErr.Field
		switch {
		case field == "":
			field = where
		case prefix != "":
			field = prefix + "." + field
		}
		return badRequest("%s: must be %s, not %s", field, jsonKind(typeErr.Type), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for this one.
		return badRequest("%s: unknown field %s", where, strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return badRequest("malformed JSON: %v", err)
}

// jsonKind names the JSON value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a " + t.Kind().String()
}

// hasControl reports whether s holds a control character, NUL included
// (which a PostgreSQL text column cannot store).
func hasControl(s string) bool {
	return strings.IndexFunc(s, unicode.IsControl) >= 0
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
