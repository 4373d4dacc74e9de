package herald_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocsGoSnippetsAreExamples keeps the Go snippets of the docs compiled:
// a ```go block after <!-- example: NAME --> must be, line for line, code of
// the example function NAME in the root package's tests, or DIR.NAME in an
// example*_test.go file of the package in DIR (heraldui.Example), which go
// vet compiles and go test runs when it has an Output comment. The blocks of one
// name appear in the function in the order of the docs; the lines between
// them are the function's own (what a snippet leaves to the reader).
// A block that is not in the function's body may be lines of the file
// that holds it: the types, methods and tests a page shows whole, which
// the example uses and go vet compiles with it. Indentation, runs of
// blanks and blank lines do not count. A block may
// open with an import declaration (a destination page's blank import that
// registers its schemes): each of its imports must be one of the imports
// of the file that holds NAME, with the same comment.
func TestDocsGoSnippetsAreExamples(t *testing.T) {
	t.Parallel()
	blocks, err := markedBlocks(runnableFiles(t))
	require.NoError(t, err)
	bodies := exampleBodies(t)
	seen := map[string]int{} // name -> the line of its body where the next block may start
	checked := 0
	for _, b := range blocks {
		if b.kind != "example" {
			continue
		}
		require.Equalf(t, "go", b.lang, "%s:%d: an example block is a ```go block", b.file, b.line)
		checked++
		ex, ok := bodies[b.name]
		if !ok {
			t.Errorf("%s:%d: <!-- example: %s --> names no example function of the root package's tests (or, as DIR.NAME, of DIR's example*_test.go)",
				b.file, b.line, b.name)
			continue
		}
		imports, code := splitImports(normalizedLines(b.text))
		for _, imp := range imports {
			if !slices.Contains(ex.imports, imp) {
				t.Errorf("%s:%d: the block imports %s, which the file of %s does not (with this comment)", b.file, b.line, imp, b.name)
			}
		}
		from := seen[b.name]
		at, problem := findLines(ex.body[from:], code)
		if problem != "" {
			if _, inFile := findLines(ex.file, code); inFile == "" {
				continue // the declarations around NAME, in its file
			}
			t.Errorf("%s:%d: the block is not the code of %s (after its line %d): %s", b.file, b.line, b.name, from+1, problem)
			continue
		}
		seen[b.name] = from + at
	}
	require.GreaterOrEqual(t, checked, 3, "too few marked Go blocks: README.md's quick starts are marked <!-- example: ... -->")
}

// TestDocsGoBlocksAreMarked keeps every Go snippet of the docs under
// TestDocsGoSnippetsAreExamples: a ```go block with no <!-- example: NAME -->
// marker on the line before it is compiled by nothing and rots as the API
// moves. A snippet that is not code (a shape shown for reference) is a
// ```text block.
func TestDocsGoBlocksAreMarked(t *testing.T) {
	t.Parallel()
	for _, file := range runnableFiles(t) {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		lines := strings.Split(string(data), "\n")
		inFence := false
		for i, l := range lines {
			if !strings.HasPrefix(l, "```") {
				continue
			}
			if inFence {
				inFence = false
				continue
			}
			inFence = true
			if lang := strings.TrimSpace(strings.TrimPrefix(l, "```")); lang != "go" && lang != "golang" {
				continue
			}
			m := []string(nil)
			if i > 0 {
				m = markerRE.FindStringSubmatch(strings.TrimSpace(lines[i-1]))
			}
			if m == nil || m[1] != "example" {
				t.Errorf("%s:%d: a ```go block without <!-- example: NAME --> on the line before it: make it the code of an example function and mark it, or make it a ```text block if it is not code", file, i+1)
			}
		}
	}
}

// example is an Example function as the docs check sees it: the
// normalized lines of its body and of its file's imports.
type example struct {
	body    []string
	imports []string
	file    []string // the whole file's, for blocks that show its types and methods
}

// splitImports splits a block's normalized lines into the imports of an
// import declaration it opens with (one line each, with its comment) and
// the code after it.
func splitImports(lines []string) (imports, code []string) {
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "import ") {
		return nil, lines
	}
	if lines[0] != "import (" {
		return []string{strings.TrimPrefix(lines[0], "import ")}, lines[1:]
	}
	for i, l := range lines[1:] {
		if l == ")" {
			return lines[1 : i+1], lines[i+2:]
		}
	}
	return lines[1:], nil
}

// exampleBodies returns every Example function in the root package's test
// files, by name, and those in the example*_test.go files of the packages
// below it, by DIR.NAME.
func exampleBodies(t *testing.T) map[string]example {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	for _, pattern := range []string{"*/example*_test.go", "*/*/example*_test.go", "*/*/*/example*_test.go"} {
		more, err := filepath.Glob(pattern)
		require.NoError(t, err)
		files = append(files, more...)
	}
	fset := token.NewFileSet()
	bodies := map[string]example{}
	for _, file := range files {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, file, src, parser.ParseComments|parser.SkipObjectResolution)
		require.NoError(t, err)
		var imports []string
		for _, spec := range f.Imports {
			from := fset.Position(spec.Pos()).Offset
			to := fset.Position(spec.End()).Offset
			if spec.Comment != nil {
				to = fset.Position(spec.Comment.End()).Offset
			}
			imports = append(imports, normalizedLines(string(src[from:to]))...)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			lbrace := fset.Position(fn.Body.Lbrace).Offset
			rbrace := fset.Position(fn.Body.Rbrace).Offset
			name := fn.Name.Name
			if dir := filepath.Dir(file); dir != "." {
				name = filepath.ToSlash(dir) + "." + name
			}
			bodies[name] = example{body: normalizedLines(string(src[lbrace+1 : rbrace])), imports: imports, file: normalizedLines(string(src))}
		}
	}
	return bodies
}

// nolintRE is a linter directive, which an example may need where a
// snippet leaves an error unchecked (defer relay.Stop(ctx)): it is not
// part of the code the docs show.
var nolintRE = regexp.MustCompile(`//nolint:\S+`)

// normalizedLines returns text's non-blank lines with their blanks trimmed
// and every inner run of blanks made one space (gofmt aligns comments and
// indents with tabs, the docs may not), without //nolint directives.
func normalizedLines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		l = nolintRE.ReplaceAllString(l, "")
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// findLines returns where want starts in body as a run of lines, or what
// differs at the best partial match.
func findLines(body, want []string) (int, string) {
	if len(want) == 0 {
		return 0, "the block is empty"
	}
	best, bestLen := -1, -1
	for i := range body {
		n := 0
		for n < len(want) && i+n < len(body) && body[i+n] == want[n] {
			n++
		}
		if n == len(want) {
			return i + len(want), ""
		}
		if n > bestLen {
			best, bestLen = i, n
		}
	}
	if bestLen <= 0 {
		return 0, fmt.Sprintf("its first line %q is not in the function", want[0])
	}
	got := "the end of the function"
	if best+bestLen < len(body) {
		got = fmt.Sprintf("%q", body[best+bestLen])
	}
	return 0, fmt.Sprintf("its line %q differs from the function's %s", want[bestLen], got)
}
