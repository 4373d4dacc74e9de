package herald_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldclaim"
	"github.com/herald-outbox/herald/heraldspec"
	_ "github.com/herald-outbox/herald/publish/heraldkafka"
	_ "github.com/herald-outbox/herald/publish/heraldmqtt"
	_ "github.com/herald-outbox/herald/publish/heraldnats"
	_ "github.com/herald-outbox/herald/publish/heraldrabbit"
	_ "github.com/herald-outbox/herald/publish/heraldredis"
	_ "github.com/herald-outbox/herald/publish/heraldwebhook"
)

// docsDestination finds the destinations the docs show on a command line:
// --destination NAME=URL (quoted or not) and --publisher URL.
var docsDestination = regexp.MustCompile(`--(?:destination|publisher)[ =]'?(?:[a-z][a-z0-9_-]*=)?([a-z]+://[^' \s]+)`)

// docsSecrets gives a documented destination the secrets its page says
// come from the environment: a password for a URL that names a user
// without one, and a webhook's signing secret.
type docsSecrets struct{ u *url.URL }

func (s docsSecrets) Secret(what string) (string, error) {
	switch what {
	case heraldspec.Password:
		if s.u.User != nil {
			if _, has := s.u.User.Password(); !has {
				return "from-the-environment", nil
			}
		}
	case heraldspec.Secret:
		return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", nil
	}
	return "", nil
}

func (docsSecrets) Where(what string) string { return "HERALD_DESTINATION_DOCS_" + what }

// The s3:// claim store of the docs' claim_check options: heraldaws, which
// registers the real one, is a module of its own. Parse only looks it up;
// nothing here opens it.
func init() {
	heraldspec.RegisterClaimStore(heraldspec.ClaimStore{Scheme: "s3",
		Open: func(context.Context, *heraldspec.Destination, *heraldspec.ClaimCheck) (heraldclaim.ObjectStore, func(), error) {
			return nil, nil, errors.New("the docs test opens no claim store")
		}})
}

// The destination URLs the docs show parse as their publisher package
// parses them: an option renamed or removed fails here. Files the URLs name
// (ca_file=/etc/...) are the reader's, so a refusal to read one passes; the
// AWS and Pub/Sub publishers are modules of their own, whose URLs their
// packages' tests check.
func TestDocsDestinationURLsParse(t *testing.T) {
	t.Parallel()
	files := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "docs/destinations/*.md"} {
		more, err := filepath.Glob(glob)
		require.NoError(t, err)
		files = append(files, more...)
	}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range docsDestination.FindAllStringSubmatch(string(b), -1) {
			raw := m[1]
			if strings.Contains(raw, "...") {
				continue // a shape, not a URL
			}
			first, _, _ := strings.Cut(raw, ",")
			u, err := url.Parse(first)
			require.NoError(t, err, "%s: %s", file, raw)
			if _, ok := heraldspec.Lookup(u.Scheme); !ok {
				continue
			}
			_, err = heraldspec.Parse(heraldspec.Destination{Name: "docs", URL: raw, Secrets: docsSecrets{u}})
			if err != nil && strings.Contains(err.Error(), "cannot read it") {
				err = nil
			}
			require.NoError(t, err, "%s shows a destination URL its publisher refuses: %s", file, raw)
			checked++
		}
	}
	require.GreaterOrEqual(t, checked, 10, "too few destination URLs found in the docs: is the pattern still right?")
}
