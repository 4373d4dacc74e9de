package heraldvet

import (
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
)

// A unit is the code checked as one function: a declared function or a
// function literal, together with the literals that run as part of it: a
// transaction's body passed to pgx.BeginFunc and the like, and literals
// called on the spot (deferred ones included). Every other literal is a
// unit of its own, since nothing says when it runs or in which
// transaction: an HTTP handler registered by a setup function that also
// migrates a table is not part of that migration's transaction.
type unit struct {
	pass *analysis.Pass
	// types are the signatures of the function and of its merged literals.
	types []*ast.FuncType
	body  *ast.BlockStmt
	// inlined are the literals that belong to the enclosing unit.
	inlined map[*ast.FuncLit]bool
}

// inspect calls fn for every node of the unit, not descending into
// literals that are units of their own.
func (u *unit) inspect(fn func(ast.Node)) {
	ast.Inspect(u.body, func(n ast.Node) bool {
		if lit, ok := n.(*ast.FuncLit); ok && !u.inlined[lit] {
			return false
		}
		if n != nil {
			fn(n)
		}
		return true
	})
}

// units returns the units of the package's files, in source order.
func units(pass *analysis.Pass) []*unit {
	inlined := inlinedLiterals(pass)
	var out []*unit
	for _, file := range pass.Files {
		ast.Inspect(file, func(n ast.Node) bool {
			switch fn := n.(type) {
			case *ast.FuncDecl:
				if fn.Body != nil {
					out = append(out, &unit{pass: pass, types: []*ast.FuncType{fn.Type}, body: fn.Body, inlined: inlined})
				}
			case *ast.FuncLit:
				if !inlined[fn] {
					out = append(out, &unit{pass: pass, types: []*ast.FuncType{fn.Type}, body: fn.Body, inlined: inlined})
				}
			}
			return true
		})
	}
	for _, u := range out {
		u.inspect(func(n ast.Node) {
			if lit, ok := n.(*ast.FuncLit); ok {
				u.types = append(u.types, lit.Type)
			}
		})
	}
	return out
}

// inlinedLiterals finds the function literals that run as part of the
// function around them: those called where they are written (but not by a
// go statement, which runs them later, on another goroutine) and those
// passed to a call that runs them in a transaction.
func inlinedLiterals(pass *analysis.Pass) map[*ast.FuncLit]bool {
	inlined := make(map[*ast.FuncLit]bool)
	spawned := make(map[*ast.CallExpr]bool)
	for _, file := range pass.Files {
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				spawned[n.Call] = true
			case *ast.CallExpr:
				if lit, ok := ast.Unparen(n.Fun).(*ast.FuncLit); ok && !spawned[n] {
					inlined[lit] = true
				}
				runner := txRunners.has(calleeFunc(pass.TypesInfo, n))
				for _, arg := range n.Args {
					if lit, ok := ast.Unparen(arg).(*ast.FuncLit); ok && (runner || takesTx(pass.TypesInfo, lit.Type)) {
						inlined[lit] = true
					}
				}
			}
			return true
		})
	}
	return inlined
}

// takesTx reports whether a function's parameters include a transaction:
// a literal like that, passed to a call, is run in the transaction by it
// (a helper such as WithTx(ctx, db, func(tx *sql.Tx) error)).
func takesTx(info *types.Info, ft *ast.FuncType) bool {
	_, ok := txParam(info, ft)
	return ok
}

// txParam describes the first parameter of ft whose type is a
// transaction: "tx *sql.Tx".
func txParam(info *types.Info, ft *ast.FuncType) (param, bool) {
	if ft.Params == nil {
		return param{}, false
	}
	for _, field := range ft.Params.List {
		t := info.TypeOf(field.Type)
		if !isTxType(t) {
			continue
		}
		name := "_"
		if len(field.Names) > 0 {
			name = field.Names[0].Name
		}
		return param{desc: name + " " + types.TypeString(t, shortQualifier), pos: field.Pos()}, true
	}
	return param{}, false
}

// A param is a parameter for a message, and where it is declared.
type param struct {
	desc string
	pos  token.Pos
}

// evidence is what shows that a unit runs a database transaction: what,
// for the message, and where.
type evidence struct {
	what string
	pos  token.Pos
}

// The kinds of evidence, best first: the one a message names is the one
// a reader recognises as "the transaction" soonest.
const (
	ownParam     = iota // func f(ctx, tx pgx.Tx)
	beginCall           // db.BeginTx, pgx.BeginFunc
	txResultCall        // a helper returning a transaction
	bodyParam           // the parameter of a transaction's body
	txVariable          // tx, ok := ctx.Value(k).(*sql.Tx)
	txMethodCall        // s.tx.Exec(...)
)

// txEvidence returns the best sign that u runs a database transaction, or
// nil: a parameter of a transaction type, a call that begins or runs a
// transaction or returns one, a variable of a transaction type, or a
// method called on a transaction. Of signs of one kind, the first in the
// source is named.
func (u *unit) txEvidence() *evidence {
	info := u.pass.TypesInfo
	var best *evidence
	bestKind := -1
	note := func(kind int, what string, pos token.Pos) {
		if best == nil || kind < bestKind || (kind == bestKind && pos < best.pos) {
			best, bestKind = &evidence{what: what, pos: pos}, kind
		}
	}
	for i, ft := range u.types {
		if p, ok := txParam(info, ft); ok {
			kind := ownParam
			if i > 0 {
				kind = bodyParam
			}
			note(kind, "parameter "+p.desc, p.pos)
		}
	}
	u.inspect(func(n ast.Node) {
		switch n := n.(type) {
		case *ast.CallExpr:
			f := calleeFunc(info, n)
			switch {
			case f != nil && txRunners.has(f):
				note(beginCall, funcName(f), n.Pos())
			case f != nil && returnsTx(f):
				note(txResultCall, funcName(f), n.Pos())
			default:
				if recv := methodRecv(info, n); recv != nil && isTxType(info.TypeOf(recv)) {
					note(txMethodCall, "a call on "+types.ExprString(recv), n.Pos())
				}
			}
		case *ast.Ident:
			if v, ok := info.Defs[n].(*types.Var); ok && !v.IsField() && isTxType(v.Type()) {
				note(txVariable, "variable "+n.Name+" "+types.TypeString(v.Type(), shortQualifier), n.Pos())
			}
		}
	})
	return best
}

// returnsTx reports whether f returns an open transaction: a Begin of any
// library, ent's Client.Tx, or the service's own helper.
func returnsTx(f *types.Func) bool {
	res := f.Type().(*types.Signature).Results()
	for i := range res.Len() {
		if isTxType(res.At(i).Type()) {
			return true
		}
	}
	return false
}

// methodRecv returns the receiver expression of a method call x.m(...),
// or nil when call is not a method call.
func methodRecv(info *types.Info, call *ast.CallExpr) ast.Expr {
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return nil
	}
	if s := info.Selections[sel]; s == nil || s.Kind() != types.MethodVal {
		return nil
	}
	return sel.X
}

// shortQualifier writes package names rather than import paths: "*sql.Tx".
func shortQualifier(p *types.Package) string { return p.Name() }
