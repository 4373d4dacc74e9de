// Package heraldspec turns specs into Herald's parts: a destination's URL
// into a Publisher, ready to hand to herald.NewRelay or to a router.
//
// Each publisher package owns its URL form (one grammar per package, one
// parse) and registers it here when it is imported, the way database/sql
// drivers do: import heraldnats and nats:// destinations open.
//
//	import (
//		"github.com/herald-outbox/herald/heraldspec"
//		_ "github.com/herald-outbox/herald/publish/heraldnats"
//	)
//
//	pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{
//		Name: "orders",
//		URL:  "nats://relay@nats.internal:4222",
//		// The password comes from HERALD_ORDERS_PASSWORD, or from the
//		// file HERALD_ORDERS_PASSWORD_FILE names.
//		Secrets: heraldspec.EnvSecrets("HERALD_ORDERS_", nil),
//	})
//
// Secrets stay out of URLs when the caller wants: a destination's password,
// token or signing secret is asked of its Secrets, which may read the
// environment, files or a secret manager. Errors name the URL part or the
// option that is wrong, never a secret.
//
// Databases open the same way: each driver package registers the DSN
// forms it reads (heraldpg: postgres:// and libpq keyword strings;
// heraldmysql: mysql://; heraldsqlite: sqlite:PATH), and
// OpenDatabase returns the outbox's Store, Admin, Writer and pool.
//
//	_, outbox, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: os.Getenv("DATABASE_URL")})
//
// Parse checks a destination without connecting (reading only the files
// its options name); Parsed.Open connects. An *OpenError says whether the
// broker could not be reached (try again later) or refused the
// configuration (it will refuse again).
package heraldspec
