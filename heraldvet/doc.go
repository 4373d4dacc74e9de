// Package heraldvet is a static check for code that uses, or should use,
// Herald's outbox. Its Analyzer reports:
//
//   - a dual write: a broker publish in a function that also runs a
//     database transaction. The publishes are the SDK calls of NATS
//     (nats.Conn.Publish, PublishMsg, Request...; JetStream's Publish,
//     PublishMsg, PublishAsync), Kafka (franz-go's Client.Produce and
//     ProduceSync, kafka-go's Writer.WriteMessages, confluent-kafka-go's
//     Producer.Produce), RabbitMQ (amqp091-go's Channel.Publish and its
//     variants), Redis (go-redis's XAdd, Publish, SPublish), SQS
//     (SendMessage, SendMessageBatch), SNS (Publish, PublishBatch) and, unless
//     -http=false, net/http POSTs (http.Post, http.PostForm, Client.Post,
//     Client.PostForm; Client.Do is not reported, since its request's method
//     is not visible in the call). A function runs a transaction when it
//     begins one (database/sql, pgx, pgxpool, sqlx, GORM's Begin and
//     Transaction, Bun, ent's Client.Tx, or any call returning a
//     transaction), passes a function literal to one (pgx.BeginFunc, a
//     WithTx helper whose callback takes a transaction), takes or declares
//     a transaction (*sql.Tx, pgx.Tx, *sqlx.Tx, bun.Tx, ent's Tx), or calls
//     a method on one;
//   - a WriteTx whose transaction argument is another variable than the
//     receiver of the function's Exec, ExecContext, Query, QueryContext,
//     QueryRow and QueryRowContext calls on transactions, so the events do
//     not commit with the rows they describe;
//   - a WriteTx whose error is ignored: called as a statement, assigned to
//     _, deferred, or run by a go statement.
//
// Calls are matched by the import path and name of the function or method
// called, so heraldvet imports no SDK. It prefers missing a mistake to
// reporting correct code, and checks one function at a time: a function
// literal is part of the function around it only when it is called on the
// spot (deferred too) or passed as a transaction's body. It does not see a
// publish in another function called from the transaction's function, in a
// goroutine or in a literal stored for later, or behind an interface of the
// service's own (an EventBus); nor a transaction begun elsewhere and
// reached through a *gorm.DB or a context; nor a write made outside any
// transaction (db.Exec) next to a publish. Test files are checked only for
// ignored WriteTx errors.
//
// Run it with go vet, or as a golangci-lint module plugin (package
// heraldvet/golangci):
//
//	go install github.com/herald-outbox/herald/cmd/heraldvet@latest
//	go vet -vettool=$(which heraldvet) ./...
package heraldvet
