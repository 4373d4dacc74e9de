// Package schema is the ent schema of the example's orders table.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Order holds the schema definition for the Order entity.
type Order struct {
	ent.Schema
}

// Fields of the Order.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").NotEmpty().Immutable(),
		field.String("customer").NotEmpty(),
		field.Int64("total_cents"),
	}
}
