package heraldsqlite_test

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

// Whatever the file's path holds, the data source name Open builds means
// that file and Open's parameters: the driver, which takes the query from
// the first '?', sees no part of the path in it, and SQLite, which decodes
// %XX escapes and stops the path at '?' or '#', decodes the path as given.
// Only the name is built: no file is opened.
func FuzzFileDSN(f *testing.F) {
	for _, p := range []string{
		"/var/lib/herald/outbox.db", "/tmp/a/b c/outbox?#.db", "/x%41.db", "/a+b", "/é/ü.db",
		"/a;b=c&d", "/..//x", "/%", "/x?vfs=memdb", "/x?_pragma=journal_mode(DELETE)", "relative/path.db",
		"//authority/x", "/:memory:", "/file:x", "/\\back\\slash", "/%2F",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		if strings.IndexByte(path, 0) >= 0 {
			// The file system refuses such a path before Open builds a name.
			return
		}
		abs := filepath.Clean("/" + path)
		dsn := heraldsqlite.FileDSN(abs)

		rest, ok := strings.CutPrefix(dsn, "file:")
		require.True(t, ok, dsn)
		require.False(t, strings.HasPrefix(rest, "//"), "SQLite would read an authority in %q", dsn)
		q := strings.IndexByte(rest, '?')
		require.GreaterOrEqual(t, q, 0, dsn)
		name, query := rest[:q], rest[q+1:]

		require.NotContains(t, name, "#", dsn)
		for i := 0; i < len(name); i++ {
			if name[i] == '%' {
				require.True(t, i+2 < len(name) && isHex(name[i+1]) && isHex(name[i+2]), "a bare %% in %q", dsn)
			}
		}
		decoded, err := url.PathUnescape(name)
		require.NoError(t, err)
		require.Equal(t, filepath.ToSlash(abs), decoded)

		got, err := url.ParseQuery(query)
		require.NoError(t, err)
		want, err := url.ParseQuery(heraldsqlite.DSNParams)
		require.NoError(t, err)
		require.Equal(t, want, got, "the path leaked into the parameters")
	})
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
