package heraldvet

import (
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
)

const doc = `report dual writes and misused herald.Writer.WriteTx calls

heraldvet reports three mistakes:

  - a broker publish (NATS, Kafka, RabbitMQ, Redis, SQS, SNS, and by
    default net/http POSTs) in a function that also runs a database
    transaction: a dual write, which loses or invents events when one of
    the two writes fails; write the event with WriteTx instead;
  - a WriteTx whose transaction is not the one the function's SQL
    statements run on, so the events do not commit with them;
  - an ignored error from WriteTx.

It checks one function at a time: a publish in another function called
from the transaction, in a goroutine, or behind an interface is not seen.
Test files are checked only for ignored WriteTx errors.`

// Config configures an analyzer made by NewAnalyzer. A nil *Config means
// defaults.
type Config struct {
	// IgnoreHTTP leaves net/http POSTs (http.Post, http.PostForm,
	// Client.Post, Client.PostForm) out of the publishes reported as dual
	// writes, for services whose POSTs inside transactions are calls that
	// may be repeated, not events. Defaults to false.
	IgnoreHTTP bool
}

// Analyzer is heraldvet with the default configuration. Its flag -http
// (default true) sets whether net/http POSTs count as publishes.
var Analyzer = NewAnalyzer(nil)

// NewAnalyzer returns heraldvet configured by cfg, with its own flags.
func NewAnalyzer(cfg *Config) *analysis.Analyzer {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	reportHTTP := !c.IgnoreHTTP
	a := &analysis.Analyzer{
		Name: "heraldvet",
		Doc:  doc,
		URL:  "https://pkg.go.dev/github.com/herald-outbox/herald/heraldvet",
		Run: func(pass *analysis.Pass) (any, error) {
			run(pass, reportHTTP)
			return nil, nil
		},
	}
	a.Flags.BoolVar(&reportHTTP, "http", reportHTTP,
		"report net/http POSTs (http.Post, http.PostForm, Client.Post, Client.PostForm) as publishes")
	return a
}

func run(pass *analysis.Pass, reportHTTP bool) {
	// Tests juggle transactions and brokers on purpose (a lock held in a
	// second transaction, a message published to see it consumed): only
	// an ignored error is reported there.
	for _, u := range units(pass) {
		if !isTestFile(pass, u.body.Pos()) {
			checkDualWrite(u, reportHTTP)
		}
	}
	for _, file := range pass.Files {
		if isTestFile(pass, file.Pos()) {
			continue
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch fn := n.(type) {
			case *ast.FuncDecl:
				if fn.Body != nil {
					checkWriteTxTransaction(pass, fn.Body)
				}
			case *ast.FuncLit:
				checkWriteTxTransaction(pass, fn.Body)
			}
			return true
		})
	}
	checkIgnoredWriteTx(pass)
}

// checkDualWrite reports the broker publishes of a unit that runs a
// database transaction. Where the publish stands does not matter: before
// the commit, an event goes out for a transaction that may roll back;
// after it, a crash between the two loses the event.
func checkDualWrite(u *unit, reportHTTP bool) {
	type publish struct {
		call *ast.CallExpr
		f    *types.Func
	}
	var found []publish
	u.inspect(func(n ast.Node) {
		if call, ok := n.(*ast.CallExpr); ok {
			f := calleeFunc(u.pass.TypesInfo, call)
			if publishes.has(f) || (reportHTTP && httpPosts.has(f)) {
				found = append(found, publish{call, f})
			}
		}
	})
	if len(found) == 0 {
		return
	}
	ev := u.txEvidence()
	if ev == nil {
		return
	}
	// The transaction's line is in the message rather than in related
	// information: golangci-lint reports related information as issues of
	// their own, which a //nolint on the publish would not silence.
	for _, p := range found {
		u.pass.Reportf(p.call.Pos(),
			"dual write: %s publishes in a function that also runs a database transaction (%s, %s); "+
				"write the event with herald's Writer.WriteTx in that transaction and let the relay publish it",
			funcName(p.f), ev.what, line(u.pass, ev.pos))
	}
}

// checkWriteTxTransaction reports a WriteTx given a transaction other than
// the one the function's statements (Exec, Query, QueryRow...) run on: its
// events would commit or roll back apart from the business rows. A
// function is its body alone, without the function literals in it: a literal
// passed to pgx.BeginFunc has a transaction of its own. When a
// statement's transaction cannot be named (a call's result, a map entry),
// the function is not checked.
func checkWriteTxTransaction(pass *analysis.Pass, body *ast.BlockStmt) {
	info := pass.TypesInfo
	var writes []*ast.CallExpr
	used := make(map[txRef]bool)
	var first ast.Expr // the first statement's transaction, for the message
	unknown := false
	ast.Inspect(body, func(n ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok {
			return false
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if isWriteTx(info, call) {
			writes = append(writes, call)
			return true
		}
		recv := methodRecv(info, call)
		if recv == nil || !isStatement(calleeFunc(info, call)) || !isTxType(info.TypeOf(recv)) {
			return true
		}
		ref, ok := refOf(info, recv)
		if !ok {
			unknown = true
			return true
		}
		if len(used) == 0 {
			first = recv
		}
		used[ref] = true
		return true
	})
	if unknown || len(used) == 0 {
		return
	}
	for _, w := range writes {
		if len(w.Args) < 2 {
			continue
		}
		ref, ok := refOf(info, w.Args[1])
		if !ok || used[ref] {
			continue
		}
		pass.Reportf(w.Args[1].Pos(),
			"WriteTx writes the events through %s, but this function's statements run on %s (%s): the events would not commit with them",
			types.ExprString(w.Args[1]), types.ExprString(first), line(pass, first.Pos()))
	}
}

// checkIgnoredWriteTx reports WriteTx calls whose error is dropped: as a
// statement, assigned to _, deferred or run by a go statement. A
// transaction that commits after a failed WriteTx commits its business
// rows without their events.
func checkIgnoredWriteTx(pass *analysis.Pass) {
	report := func(e ast.Expr) {
		if call, ok := ast.Unparen(e).(*ast.CallExpr); ok && isWriteTx(pass.TypesInfo, call) {
			pass.Reportf(call.Pos(),
				"the error from WriteTx is ignored: if the events were not written, the transaction must not commit")
		}
	}
	for _, file := range pass.Files {
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ExprStmt:
				report(n.X)
			case *ast.DeferStmt:
				report(n.Call)
			case *ast.GoStmt:
				report(n.Call)
			case *ast.AssignStmt:
				if len(n.Lhs) != len(n.Rhs) {
					return true
				}
				for i, lhs := range n.Lhs {
					if id, ok := lhs.(*ast.Ident); ok && id.Name == "_" {
						report(n.Rhs[i])
					}
				}
			}
			return true
		})
	}
}

// isStatement reports whether f runs SQL: the methods whose receiver is
// the transaction a function's business writes go through.
func isStatement(f *types.Func) bool {
	return f != nil && slices.Contains(statements, f.Name())
}

// A txRef names a transaction by the variable that holds it, and the
// fields followed from there: tx is {tx, ""}, s.tx is {s, ".tx"}.
type txRef struct {
	obj  types.Object
	path string
}

// refOf names the transaction expression e, or returns false when e is
// not a variable or a chain of fields (a call, an index, a conversion).
func refOf(info *types.Info, e ast.Expr) (txRef, bool) {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		if obj := info.ObjectOf(e); obj != nil {
			return txRef{obj: obj}, true
		}
	case *ast.SelectorExpr:
		if sel := info.Selections[e]; sel == nil || sel.Kind() != types.FieldVal {
			return txRef{}, false
		}
		if base, ok := refOf(info, e.X); ok {
			base.path += "." + e.Sel.Name
			return base, true
		}
	}
	return txRef{}, false
}

func isTestFile(pass *analysis.Pass, pos token.Pos) bool {
	return strings.HasSuffix(pass.Fset.File(pos).Name(), "_test.go")
}

// line is "line N" for pos.
func line(pass *analysis.Pass, pos token.Pos) string {
	return "line " + strconv.Itoa(pass.Fset.Position(pos).Line)
}
