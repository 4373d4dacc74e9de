package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is the service on a fresh, migrated schema.
type fixture struct {
	pool    *pgxpool.Pool
	schema  string
	handler http.Handler
}

func setup(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	schema := testenv.Schema(t)
	require.NoError(t, migrate(ctx, pool, schema))
	store, err := heraldpg.New(pool, &heraldpg.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	h, err := newServer(pool, schema, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return &fixture{pool: pool, schema: schema, handler: h}
}

func (f *fixture) do(method, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, httptest.NewRequest(method, "/orders", strings.NewReader(body)))
	return rec
}

func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(),
		fmt.Sprintf(`SELECT count(*) FROM %s.%s`, f.schema, table)).Scan(&n))
	return n
}

const validOrder = `{"customer": "Ada", "items": [{"sku": "tea", "quantity": 2, "price_cents": 450}]}`

func TestPlaceOrderWritesTheOrderAndItsEventInOneTransaction(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	rec := f.do(http.MethodPost, `{"customer": "Ada Lovelace", "items": [
		{"sku": "tea", "quantity": 2, "price_cents": 450},
		{"sku": "cup", "quantity": 1, "price_cents": 1200}]}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var resp placeOrderResponse
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
	require.NoError(t, uuid.Validate(resp.ID))
	require.EqualValues(t, 2*450+1200, resp.TotalCents)

	var (
		customer             string
		total                int64
		orderXmin, eventXmin string
		topic, typ, aggType  string
		aggID, key, state    string
		payload              []byte
	)
	require.NoError(t, f.pool.QueryRow(ctx, fmt.Sprintf(
		`SELECT customer, total_cents, xmin::text FROM %s.orders WHERE id = $1`, f.schema), resp.ID).
		Scan(&customer, &total, &orderXmin))
	require.Equal(t, "Ada Lovelace", customer)
	require.Equal(t, resp.TotalCents, total)

	require.Equal(t, 1, f.count(t, "herald_outbox"))
	require.NoError(t, f.pool.QueryRow(ctx, fmt.Sprintf(
		`SELECT topic, type, aggregate_type, aggregate_id, key, state, payload, xmin::text FROM %s.herald_outbox`, f.schema)).
		Scan(&topic, &typ, &aggType, &aggID, &key, &state, &payload, &eventXmin))
	require.Equal(t, "orders.placed", topic)
	require.Equal(t, "order.placed", typ)
	require.Equal(t, "order", aggType)
	require.Equal(t, resp.ID, aggID)
	require.Equal(t, resp.ID, key, "the ordering key defaults to the aggregate id")
	require.Equal(t, "ready", state)
	// Rows inserted by one transaction carry its id in xmin.
	require.Equal(t, orderXmin, eventXmin, "the order and its event were written by different transactions")

	var ev orderPlaced
	require.NoError(t, json.Unmarshal(payload, &ev))
	require.Equal(t, resp.ID, ev.ID)
	require.Equal(t, "Ada Lovelace", ev.Customer)
	require.Equal(t, total, ev.TotalCents)
	require.Equal(t, []item{{"tea", 2, 450}, {"cup", 1, 1200}}, ev.Items)
	require.False(t, ev.CreatedAt.IsZero())
}

func TestPlaceOrderAcceptsValuesAtTheLimits(t *testing.T) {
	t.Parallel()
	f := setup(t)
	items := make([]string, maxItems)
	for i := range items {
		items[i] = fmt.Sprintf(`{"sku": %q, "quantity": %d, "price_cents": 0}`, strings.Repeat("s", maxSKULen), maxQuantity)
	}
	items[0] = fmt.Sprintf(`{"sku": "gold", "quantity": %d, "price_cents": %d}`, maxQuantity, maxPriceCents)
	customer := strings.Repeat("é", maxCustomerLen) // characters, not bytes

	rec := f.do(http.MethodPost, fmt.Sprintf(`{"customer": %q, "items": [%s]}`, customer, strings.Join(items, ",")))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var resp placeOrderResponse
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
	require.EqualValues(t, int64(maxQuantity)*maxPriceCents, resp.TotalCents)
	require.Equal(t, 1, f.count(t, "orders"))
	require.Equal(t, 1, f.count(t, "herald_outbox"))
}

// When the event cannot be written, the order is not written either.
func TestAFailedEventWriteRollsBackTheOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	rename := func(from, to string) {
		_, err := f.pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s.%s RENAME TO %s`, f.schema, from, to))
		require.NoError(t, err)
	}

	rename("herald_outbox", "herald_outbox_away")
	rec := f.do(http.MethodPost, validOrder)
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Contains(t, rec.Body.String(), "the order was not placed")
	require.Zero(t, f.count(t, "orders"), "an order was committed without its event")

	rename("herald_outbox_away", "herald_outbox")
	rec = f.do(http.MethodPost, validOrder)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Equal(t, 1, f.count(t, "orders"))
	require.Equal(t, 1, f.count(t, "herald_outbox"))
}

func TestBadRequestsAreRefusedAndWriteNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)

	item := `{"sku": "tea", "quantity": 1, "price_cents": 100}`
	order := func(items ...string) string {
		return `{"customer": "Ada", "items": [` + strings.Join(items, ",") + `]}`
	}
	many := make([]string, maxItems+1)
	for i := range many {
		many[i] = item
	}

	for _, tc := range []struct {
		name   string
		method string
		body   string
		status int
		msg    string
	}{
		{"GetIsNotAllowed", http.MethodGet, "", 405, "method GET is not allowed: use POST"},
		{"PutIsNotAllowed", http.MethodPut, validOrder, 405, "method PUT is not allowed"},
		{"DeleteIsNotAllowed", http.MethodDelete, "", 405, "use POST"},
		{"EmptyBody", http.MethodPost, "", 400, "request body is empty"},
		{"TruncatedJSON", http.MethodPost, `{"customer": "Ada",`, 400, "malformed JSON"},
		{"SyntaxError", http.MethodPost, `{"customer": "Ada",}`, 400, "malformed JSON at byte"},
		{"NotAnObject", http.MethodPost, `["Ada"]`, 400, "request body: must be an object, not array"},
		{"TwoObjects", http.MethodPost, validOrder + validOrder, 400, "unexpected data after the JSON object"},
		{"TrailingGarbage", http.MethodPost, validOrder + " x", 400, "unexpected data after the JSON object"},
		{"UnknownField", http.MethodPost, `{"customer": "Ada", "coupon": "FREE", "items": [` + item + `]}`, 400, `request body: unknown field "coupon"`},
		{"UnknownItemField", http.MethodPost, order(item, `{"sku": "cup", "quantity": 1, "price_cents": 5, "colour": "red"}`), 400, `items[1]: unknown field "colour"`},
		{"MissingCustomer", http.MethodPost, `{"items": [` + item + `]}`, 400, "customer: required"},
		{"NullCustomer", http.MethodPost, `{"customer": null, "items": [` + item + `]}`, 400, "customer: required"},
		{"BlankCustomer", http.MethodPost, `{"customer": "  \t", "items": [` + item + `]}`, 400, "customer: required"},
		{"CustomerNotAString", http.MethodPost, `{"customer": 42, "items": [` + item + `]}`, 400, "customer: must be a string, not number"},
		{"CustomerTooLong", http.MethodPost, `{"customer": "` + strings.Repeat("é", maxCustomerLen+1) + `", "items": [` + item + `]}`, 400, "customer: 101 characters is over the limit of 100"},
		{"CustomerWithNUL", http.MethodPost, `{"customer": "Ada\u0000", "items": [` + item + `]}`, 400, "customer: contains a control character"},
		{"MissingItems", http.MethodPost, `{"customer": "Ada"}`, 400, "items: at least one item is required"},
		{"NoItems", http.MethodPost, order(), 400, "items: at least one item is required"},
		{"ItemsNotAnArray", http.MethodPost, `{"customer": "Ada", "items": {}}`, 400, "items: must be an array, not object"},
		{"TooManyItems", http.MethodPost, order(many...), 400, "items: 51 items is over the limit of 50"},
		{"ItemNotAnObject", http.MethodPost, order(item, "5"), 400, "items[1]: must be an object, not number"},
		{"NullItem", http.MethodPost, order("null"), 400, "items[0].sku: required"},
		{"MissingSKU", http.MethodPost, order(`{"quantity": 1, "price_cents": 1}`), 400, "items[0].sku: required"},
		{"SKUTooLong", http.MethodPost, order(`{"sku": "` + strings.Repeat("s", maxSKULen+1) + `", "quantity": 1, "price_cents": 1}`), 400, "items[0].sku: 65 characters is over the limit of 64"},
		{"SKUWithNewline", http.MethodPost, order(`{"sku": "t\nea", "quantity": 1, "price_cents": 1}`), 400, "items[0].sku: contains a control character"},
		{"MissingQuantity", http.MethodPost, order(`{"sku": "tea", "price_cents": 1}`), 400, "items[0].quantity: must be greater than 0"},
		{"ZeroQuantity", http.MethodPost, order(item, `{"sku": "cup", "quantity": 0, "price_cents": 1}`), 400, "items[1].quantity: must be greater than 0"},
		{"NegativeQuantity", http.MethodPost, order(`{"sku": "tea", "quantity": -3, "price_cents": 1}`), 400, "items[0].quantity: must be greater than 0"},
		{"FractionalQuantity", http.MethodPost, order(`{"sku": "tea", "quantity": 1.5, "price_cents": 1}`), 400, "items[0].quantity: must be an integer, not number 1.5"},
		{"QuantityAsString", http.MethodPost, order(`{"sku": "tea", "quantity": "2", "price_cents": 1}`), 400, "items[0].quantity: must be an integer, not string"},
		{"QuantityBeyondInt64", http.MethodPost, order(`{"sku": "tea", "quantity": 1e30, "price_cents": 1}`), 400, "items[0].quantity: must be an integer, not number 1e30"},
		{"QuantityOverTheCap", http.MethodPost, order(`{"sku": "tea", "quantity": 1000001, "price_cents": 1}`), 400, "items[0].quantity: must be at most 1000000"},
		{"NegativePrice", http.MethodPost, order(item, item, `{"sku": "tea", "quantity": 1, "price_cents": -1}`), 400, "items[2].price_cents: must not be negative"},
		{"PriceOverTheCap", http.MethodPost, order(`{"sku": "tea", "quantity": 1, "price_cents": 1000000001}`), 400, "items[0].price_cents: must be at most 1000000000"},
		{"BodyOver1MiB", http.MethodPost, `{"customer": "` + strings.Repeat("a", maxBodyBytes) + `", "items": [` + item + `]}`, 413, "request body is over the limit of 1048576 bytes"},
		{"TrailingDataPast1MiB", http.MethodPost, validOrder + strings.Repeat(" ", maxBodyBytes), 413, "request body is over the limit of 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := f.do(tc.method, tc.body)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var resp struct{ Error string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
			require.Contains(t, resp.Error, tc.msg)
			if tc.status == http.StatusMethodNotAllowed {
				require.Equal(t, http.MethodPost, rec.Header().Get("Allow"))
			}
			require.Zero(t, f.count(t, "orders"))
			require.Zero(t, f.count(t, "herald_outbox"))
		})
	}
}

func TestSchemaNameIsChecked(t *testing.T) {
	t.Parallel()
	_, err := newServer(nil, `orders"; DROP TABLE x; --`, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "must match")
	require.ErrorContains(t, migrate(context.Background(), nil, "Orders"), "must match")
}
