package herald_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxFuncLines is the longest a non-test function of the root package may
// be: a longer one is a stage of the pipeline that has no name yet.
const maxFuncLines = 60

func TestRootFunctionsStayShort(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			checked++
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			require.LessOrEqualf(t, lines, maxFuncLines, "%s: %s is %d lines; give its stages names",
				fset.Position(fn.Pos()), fn.Name.Name, lines)
		}
	}
	require.Greater(t, checked, 50, "too few functions found to be the root package")
}
