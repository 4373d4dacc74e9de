-- name: CreateOrder :one
INSERT INTO orders (id, customer, total_cents)
VALUES ($1, $2, $3)
RETURNING *;

-- name: ListOrders :many
SELECT * FROM orders
ORDER BY id;

-- name: CountOrders :one
SELECT count(*) FROM orders;
