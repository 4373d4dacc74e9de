package herald_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README is the front door and the manual lives in docs/, one page per
// topic; pages link to each other's sections. These tests keep the links
// and the root package's map of the module true, offline.

// docFiles are the Markdown files whose relative links must resolve: the
// front door, the manual's pages (the destination pages too), and the
// READMEs of deploy/ and examples/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md"}
	for _, pattern := range []string{"docs/*.md", "docs/destinations/*.md", "deploy/*.md", "examples/*/README.md"} {
		matches, err := filepath.Glob(filepath.FromSlash(pattern))
		require.NoError(t, err)
		require.NotEmpty(t, matches, "no %s", pattern)
		files = append(files, matches...)
	}
	return files
}

func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	anchors := map[string]map[string]bool{} // Markdown file -> its anchors
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		doc, err := parseMarkdown(file)
		require.NoError(t, err)
		anchors[file] = doc.anchors
		return doc.anchors
	}
	checked := 0
	for _, file := range docFiles(t) {
		doc, err := parseMarkdown(file)
		require.NoError(t, err)
		for _, l := range doc.links {
			checked++
			if problem := checkLink(file, l.target, anchorsOf); problem != "" {
				t.Errorf("%s:%d: link %q: %s", file, l.line, l.target, problem)
			}
		}
	}
	require.Greater(t, checked, 100, "too few links found: is the parser still reading the pages?")
}

// checkLink says what is wrong with a link from file, or "" when it
// resolves (or is not relative: a URL with a scheme is not checked).
func checkLink(file, target string, anchorsOf func(string) map[string]bool) string {
	if regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	p, frag, _ := strings.Cut(target, "#")
	dest := file
	if p != "" {
		unescaped, err := url.PathUnescape(p)
		if err != nil {
			return "bad escape in path"
		}
		if strings.HasPrefix(unescaped, "/") { // GitHub: relative to the repository's root
			dest = path.Clean(strings.TrimPrefix(unescaped, "/"))
		} else {
			dest = path.Join(path.Dir(filepath.ToSlash(file)), unescaped)
		}
		if dest == ".." || strings.HasPrefix(dest, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.FromSlash(dest)); err != nil {
			return "no file or directory " + dest
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return "" // anchors into code (#L10) are GitHub's, not checked
	}
	anchor, err := url.PathUnescape(frag)
	if err != nil {
		return "bad escape in anchor"
	}
	if !anchorsOf(filepath.FromSlash(dest))[anchor] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", dest, anchor)
	}
	return ""
}

type mdLink struct {
	line   int
	target string
}

type markdown struct {
	anchors map[string]bool
	links   []mdLink
}

var (
	fenceRE   = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	codeRE    = regexp.MustCompile("`+[^`]*`+")
	// An inline link or image: ](target) or ](target "title").
	linkRE = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// A reference definition: [name]: target.
	refRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// HTML anchors a page may set itself.
	idRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// parseMarkdown reads a file's headings (as GitHub's anchors, duplicates
// numbered -1, -2...) and its links, leaving out fenced code and code spans.
func parseMarkdown(file string) (markdown, error) {
	f, err := os.Open(file)
	if err != nil {
		return markdown{}, err
	}
	defer f.Close()
	doc := markdown{anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			switch {
			case fence == "":
				fence = m[1]
			case strings.HasPrefix(strings.TrimSpace(line), fence) && strings.Trim(strings.TrimSpace(line), fence[:1]) == "":
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			a := slug(m[2])
			if k, dup := seen[a]; dup {
				seen[a] = k + 1
				a = fmt.Sprintf("%s-%d", a, k+1)
			} else {
				seen[a] = 0
			}
			doc.anchors[a] = true
		}
		for _, m := range idRE.FindAllStringSubmatch(line, -1) {
			doc.anchors[m[1]] = true
		}
		text := codeRE.ReplaceAllString(line, "``")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			doc.links = append(doc.links, mdLink{line: n, target: m[1]})
		}
		if m := refRE.FindStringSubmatch(text); m != nil {
			doc.links = append(doc.links, mdLink{line: n, target: m[1]})
		}
	}
	return doc, sc.Err()
}

var (
	mdLinkTextRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	notSlugRE    = regexp.MustCompile(`[^\p{L}\p{M}\p{N}_\- ]`)
)

// slug is GitHub's anchor for a heading: the rendered text lower-cased,
// punctuation dropped, spaces as hyphens.
func slug(heading string) string {
	s := mdLinkTextRE.ReplaceAllString(heading, "$1")
	s = strings.ReplaceAll(s, "`", "")
	s = strings.ToLower(strings.TrimSpace(s))
	s = notSlugRE.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

func TestSlugFollowsGitHub(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Static check: heraldvet":                                             "static-check-heraldvet",
		"Change-data-capture relay (PostgreSQL)":                              "change-data-capture-relay-postgresql",
		"Credentials and TLS: Redis, RabbitMQ, webhooks":                      "credentials-and-tls-redis-rabbitmq-webhooks",
		"Google Cloud Pub/Sub":                                                "google-cloud-pubsub",
		"`herald_outbox` and [its indexes](x.md)":                             "herald_outbox-and-its-indexes",
		"Configuration (library)":                                             "configuration-library",
		"HeraldCDCSlotLost":                                                   "heraldcdcslotlost",
		"Before: the handler with a dual write":                               "before-the-handler-with-a-dual-write",
		"What an event costs":                                                 "what-an-event-costs",
		"Pausing a topic or a destination":                                    "pausing-a-topic-or-a-destination",
		"Using Herald from your ORM":                                          "using-herald-from-your-orm",
		"Design note: ordered claims that lease keys instead of writing rows": "design-note-ordered-claims-that-lease-keys-instead-of-writing-rows",
	} {
		require.Equal(t, want, slug(heading), heading)
	}
}

func TestMarkdownParserNumbersDuplicateAnchorsAndSkipsCode(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "page.md")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join([]string{
		"# Page",
		"## Runbook",
		"## Runbook",
		"```sh",
		"# not a heading [nor](a-link.md)",
		"```",
		"## Runbook",
		"See [there](#runbook-2), not `[code](x.md)`.",
	}, "\n")), 0o600))
	doc, err := parseMarkdown(file)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"page": true, "runbook": true, "runbook-1": true, "runbook-2": true}, doc.anchors)
	require.Equal(t, []mdLink{{line: 8, target: "#runbook-2"}}, doc.links)
	anchorsOf := func(string) map[string]bool { return doc.anchors }
	require.Empty(t, checkLink(file, "#runbook-2", anchorsOf))
	require.Contains(t, checkLink(file, "#runbook-3", anchorsOf), "no heading with the anchor #runbook-3")
	require.Contains(t, checkLink("README.md", "docs/no-such-page.md", anchorsOf), "no file or directory docs/no-such-page.md")
	require.Empty(t, checkLink("README.md", "https://example.com/x.md#nowhere", anchorsOf))
}

// TestDocGoNamesEveryPublicPackage keeps the root package's documentation
// a map of the module: every package a user can import is named in doc.go
// by its path in the module (driver/heraldpg, heraldadmin).
func TestDocGoNamesEveryPublicPackage(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	require.NotNil(t, f.Doc, "doc.go has no package comment")
	doc := f.Doc.Text()
	pkgs := publicPackages(t)
	require.Contains(t, pkgs, "heraldadmin", "the walk found too little: %v", pkgs)
	for _, p := range pkgs {
		named := regexp.MustCompile(`(^|[^\w/])` + regexp.QuoteMeta(p) + `($|[^\w/])`)
		if !named.MatchString(doc) {
			t.Errorf("doc.go does not name the package %s", p)
		}
	}
}

// publicPackages are the root module's importable packages, as paths in
// the module: not the root, not main, not under internal or testdata, not
// in a nested module (examples/orm, deploy/kubernetes), not test-only.
func publicPackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || p == "." {
			return nil
		}
		name := d.Name()
		if name == "internal" || name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
			return filepath.SkipDir
		}
		pkg, err := packageName(p)
		if err != nil {
			return err
		}
		if pkg != "" && pkg != "main" {
			pkgs = append(pkgs, filepath.ToSlash(p))
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(pkgs)
	return pkgs
}

// packageName is the package of dir's non-test Go files, "" when it has
// none.
func packageName(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return "", err
		}
		if !ignored(f) {
			return f.Name.Name, nil
		}
	}
	return "", nil
}

// ignored reports whether a file is left out of every build (a generator
// run with go run, say).
func ignored(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() >= f.Package {
			break
		}
		for _, c := range g.List {
			if c.Text == "//go:build ignore" {
				return true
			}
		}
	}
	return false
}
