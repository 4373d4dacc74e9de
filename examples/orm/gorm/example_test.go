package gorm_test

import (
	"context"
	"log"
	"os"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
)

// The order and its event in one GORM transaction: the writer joins the
// transaction through tx.Statement.ConnPool. It needs a PostgreSQL server,
// so it is compiled, not run; TestOrders runs it on one.
func Example() {
	ctx := context.Background()
	db, _ := gorm.Open(postgres.Open(os.Getenv("DATABASE_URL")), &gorm.Config{})
	order := Order{ID: "o-1", Customer: "acme", TotalCents: 4200}
	body := []byte(`{"customer":"acme","total_cents":4200}`)

	outbox, _ := heraldpg.NewExecWriter(nil)
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&order).Error; err != nil {
			return err
		}
		return outbox.WriteTx(ctx, tx.Statement.ConnPool, herald.Message{Topic: "orders.placed", AggregateID: order.ID, Payload: body})
	})
	if err != nil {
		log.Fatal(err)
	}
}
