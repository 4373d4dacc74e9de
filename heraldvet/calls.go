package heraldvet

import (
	"go/ast"
	"go/types"
	"slices"
	"strings"

	"golang.org/x/tools/go/types/typeutil"
)

// A funcSet names functions and methods by where they are declared, so that
// no SDK has to be imported to recognise its calls: the import path, the
// receiver's type name ("" for a package-level function, "*" for any type of
// the package), then the names.
type funcSet map[string]map[string][]string

// has reports whether f is in the set. A method whose receiver has no
// name matches only "*".
func (s funcSet) has(f *types.Func) bool {
	if f == nil || f.Pkg() == nil {
		return false
	}
	byRecv, ok := s[pkgPath(f.Pkg())]
	if !ok {
		return false
	}
	if f.Type().(*types.Signature).Recv() == nil {
		return slices.Contains(byRecv[""], f.Name())
	}
	if r := recvName(f); r != "" && slices.Contains(byRecv[r], f.Name()) {
		return true
	}
	return slices.Contains(byRecv["*"], f.Name())
}

// publishes are the SDK calls that send a message to a broker: made in a
// function that also runs a database transaction, each is a dual write.
var publishes = funcSet{
	"github.com/nats-io/nats.go": {
		"Conn": {"Publish", "PublishMsg", "PublishRequest", "Request", "RequestMsg",
			"RequestWithContext", "RequestMsgWithContext"},
		// The legacy JetStreamContext embeds JetStream, which declares these.
		"JetStream": {"Publish", "PublishMsg", "PublishAsync", "PublishMsgAsync"},
	},
	"github.com/nats-io/nats.go/jetstream": {
		// jetstream.JetStream embeds Publisher, which declares these.
		"Publisher": {"Publish", "PublishMsg", "PublishAsync", "PublishMsgAsync"},
	},
	"github.com/twmb/franz-go/pkg/kgo": {
		"Client": {"Produce", "ProduceSync", "TryProduce"},
	},
	"github.com/segmentio/kafka-go": {
		"Writer": {"WriteMessages"},
		"Conn":   {"WriteMessages", "WriteCompressedMessages"},
	},
	"github.com/confluentinc/confluent-kafka-go/kafka": {
		"Producer": {"Produce"},
	},
	"github.com/confluentinc/confluent-kafka-go/v2/kafka": {
		"Producer": {"Produce"},
	},
	"github.com/rabbitmq/amqp091-go": {
		"Channel": {"Publish", "PublishWithContext", "PublishWithDeferredConfirm",
			"PublishWithDeferredConfirmWithContext"},
	},
	"github.com/streadway/amqp": {
		"Channel": {"Publish"},
	},
	// go-redis declares its commands once, on an unexported type that
	// Client, ClusterClient, Ring, Pipeline and Tx embed, and again in the
	// Cmdable interfaces: any receiver of the package is matched by name.
	"github.com/redis/go-redis/v9": {
		"*": {"XAdd", "Publish", "SPublish"},
	},
	"github.com/go-redis/redis/v8": {
		"*": {"XAdd", "Publish", "SPublish"},
	},
	"github.com/aws/aws-sdk-go-v2/service/sqs": {
		"Client": {"SendMessage", "SendMessageBatch"},
	},
	"github.com/aws/aws-sdk-go-v2/service/sns": {
		"Client": {"Publish", "PublishBatch"},
	},
}

// httpPosts are the net/http calls reported as publishes unless
// Config.IgnoreHTTP is set. Only POSTs whose method is visible in the call:
// a Client.Do's request could be a GET, so Do is not reported.
var httpPosts = funcSet{
	"net/http": {
		"":       {"Post", "PostForm"},
		"Client": {"Post", "PostForm"},
	},
}

// txRunners start a database transaction, or run a function in one. A
// function literal passed to a call that names a function here (pgx's
// BeginFunc, GORM's Transaction, Bun's RunInTx) is the transaction's body
// and is checked as part of the function around the call.
var txRunners = funcSet{
	"database/sql": {
		"DB":   {"Begin", "BeginTx"},
		"Conn": {"BeginTx"},
	},
	"github.com/jackc/pgx/v5": {
		"":     {"BeginFunc", "BeginTxFunc"},
		"Conn": {"Begin", "BeginTx"},
		"Tx":   {"Begin"},
	},
	"github.com/jackc/pgx/v5/pgxpool": {
		"Pool": {"Begin", "BeginTx"},
		"Conn": {"Begin", "BeginTx"},
		"Tx":   {"Begin"},
	},
	"github.com/jackc/pgx/v4": {
		"":     {"BeginFunc", "BeginTxFunc"},
		"Conn": {"Begin", "BeginTx", "BeginFunc", "BeginTxFunc"},
		"Tx":   {"Begin", "BeginFunc"},
	},
	"github.com/jackc/pgx/v4/pgxpool": {
		"Pool": {"Begin", "BeginTx", "BeginFunc", "BeginTxFunc"},
		"Conn": {"Begin", "BeginTx", "BeginFunc", "BeginTxFunc"},
		"Tx":   {"Begin", "BeginFunc"},
	},
	"github.com/jmoiron/sqlx": {
		"DB":   {"Beginx", "BeginTxx", "MustBegin", "MustBeginTx"},
		"Conn": {"BeginTxx"},
	},
	// A *gorm.DB is a transaction only when it came from one of these.
	"gorm.io/gorm": {
		"DB": {"Transaction", "Begin"},
	},
	"github.com/uptrace/bun": {
		"*": {"RunInTx", "BeginTx", "Begin"},
	},
	// An inbox handler runs in the transaction that records the event.
	"github.com/herald-outbox/herald/heraldinbox": {
		"Inbox": {"ProcessPgx", "ProcessSQL"},
	},
}

// txTypes are the types of an open transaction, by import path and name.
// ent's generated Tx is recognised by its methods instead (isEntTx).
var txTypes = map[string][]string{
	"database/sql":                    {"Tx"},
	"github.com/jackc/pgx/v5":         {"Tx"},
	"github.com/jackc/pgx/v5/pgxpool": {"Tx"},
	"github.com/jackc/pgx/v4":         {"Tx"},
	"github.com/jackc/pgx/v4/pgxpool": {"Tx"},
	"github.com/jmoiron/sqlx":         {"Tx"},
	"github.com/uptrace/bun":          {"Tx"},
}

// statements are the methods that run a business write or read on a
// transaction: the receiver of these is the transaction the function's
// work goes through.
var statements = []string{
	"Exec", "ExecContext", "Query", "QueryContext", "QueryRow", "QueryRowContext",
	"NamedExec", "NamedExecContext", "SendBatch", "CopyFrom",
}

// heraldPath is the import path of Herald's root package, which declares
// Writer.
const heraldPath = "github.com/herald-outbox/herald"

// isTxType reports whether t is an open transaction: *sql.Tx, pgx.Tx,
// *sqlx.Tx, bun.Tx, an ent Tx.
func isTxType(t types.Type) bool {
	named := namedOf(t)
	if named == nil || named.Obj().Pkg() == nil {
		return false
	}
	return slices.Contains(txTypes[pkgPath(named.Obj().Pkg())], named.Obj().Name()) || isEntTx(named)
}

// isEntTx recognises the Tx that ent generates into the user's own package
// by its methods: no import path can name it.
func isEntTx(named *types.Named) bool {
	if named.Obj().Name() != "Tx" {
		return false
	}
	ptr := types.NewPointer(named)
	for _, m := range []string{"Commit", "Rollback", "OnCommit", "OnRollback", "Client"} {
		obj, _, _ := types.LookupFieldOrMethod(ptr, true, named.Obj().Pkg(), m)
		if _, ok := obj.(*types.Func); !ok {
			return false
		}
	}
	return true
}

// isWriteTx reports whether call is herald's (*Writer[TTx]).WriteTx.
func isWriteTx(info *types.Info, call *ast.CallExpr) bool {
	f := calleeFunc(info, call)
	return f != nil && f.Pkg() != nil && pkgPath(f.Pkg()) == heraldPath &&
		recvName(f) == "Writer" && f.Name() == "WriteTx"
}

// calleeFunc returns the function or method call calls, or nil for a call
// of a function value, a conversion or a builtin.
func calleeFunc(info *types.Info, call *ast.CallExpr) *types.Func {
	f, _ := typeutil.Callee(info, call).(*types.Func)
	return f
}

// recvName is the name of f's receiver type, without pointer or type
// arguments; "" for a package-level function.
func recvName(f *types.Func) string {
	recv := f.Type().(*types.Signature).Recv()
	if recv == nil {
		return ""
	}
	if named := namedOf(recv.Type()); named != nil {
		return named.Obj().Name()
	}
	return ""
}

// namedOf returns the named type of t or *t, or nil.
func namedOf(t types.Type) *types.Named {
	t = types.Unalias(t)
	if p, ok := t.(*types.Pointer); ok {
		t = types.Unalias(p.Elem())
	}
	named, _ := t.(*types.Named)
	return named
}

// pkgPath is p's import path with any vendor directory removed, so that a
// vendored SDK matches too.
func pkgPath(p *types.Package) string {
	path := p.Path()
	if i := strings.LastIndex(path, "/vendor/"); i >= 0 {
		return path[i+len("/vendor/"):]
	}
	return path
}

// funcName names f for a message: "nats.Conn.Publish", "pgx.BeginFunc".
func funcName(f *types.Func) string {
	if r := recvName(f); r != "" {
		return f.Pkg().Name() + "." + r + "." + f.Name()
	}
	return f.Pkg().Name() + "." + f.Name()
}
