package heraldspec_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// echoTarget is what the test scheme parses into: the URLs and the
// password it was given.
type echoTarget struct {
	d        *heraldspec.Destination
	urls     []*url.URL
	password string
}

func (e *echoTarget) Open(context.Context) (herald.Publisher, func(), error) {
	if e.urls[0].Port() == "1" {
		return nil, nil, heraldspec.Unreachable(e.d, errors.New("dial tcp: connection refused"))
	}
	return herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }), func() {}, nil
}

func init() {
	heraldspec.Register(heraldspec.Scheme{
		Kind: "echo", Schemes: []string{"echo", "echos"}, ManyURLs: true,
		UserIsSecret: func(*heraldspec.Destination) bool { return true },
		Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
			pw, err := d.Secret(heraldspec.Password)
			if err != nil {
				return nil, err
			}
			if _, err := heraldspec.Options("echo://", urls, []string{"a"}); err != nil {
				return nil, err
			}
			return &echoTarget{d: d, urls: urls, password: pw}, nil
		},
	})
	heraldspec.Register(heraldspec.Scheme{
		Kind: "single", Schemes: []string{"single"},
		Parse: func(*heraldspec.Destination, []*url.URL) (heraldspec.Target, error) { return &echoTarget{}, nil },
	})
}

func TestParseChecksTheURLsBeforeThePublisherPackage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, dest, url, says string }{
		{"NoURL", "orders", " ", "destination orders: no URL"},
		{"BadName", "Orders!", "echo://h", `destination Orders!: name "Orders!" must match`},
		{"NoScheme", "orders", "nats.internal/x", "destination orders: nats.internal/x has no scheme: use "},
		{"NoSchemeWithAFragment", "orders", "#000:// hunter2!@00", "destination orders: the user information holds"},
		{"NoSchemeWithUserinfo", "orders", "nats//u:hunter2@h", "destination orders: the URL has no scheme: use "},
		{"UnknownScheme", "orders", "carrier://h", `destination orders: scheme "carrier" is not supported: use `},
		{"TwoBrokers", "orders", "echo://a,single://b", "one destination takes URLs of one broker; give another destination for single"},
		{"NoHost", "orders", "echo:///path", "destination orders: echo:///path has no host"},
		{"BadPort", "orders", "echo://h:70000", `port "70000" is not a port number`},
		{"PasswordWithSlash", "orders", "echo://u:hun/ter2@h", "destination orders: not a URL"},
		{"PasswordWithAt", "orders", "echo://u:hun@ter2@h/x@y", "that is not percent-encoded"},
		{"TokenInTheFragment", "orders", "echo://#:hunter2@h", "that is not percent-encoded"},
		{"TokenWithAHash", "orders", "echo://hun#ter2@h", "that is not percent-encoded"},
		{"OneURLOnly", "orders", "single://a,single://b", "a single destination takes one URL"},
		{"UnknownOption", "orders", "echo://h?b=1", `option "b" is not known: a echo:// URL takes a`},
		{"OptionsDiffer", "orders", "echo://h?a=1,echo://i?a=2", "option a differs between the URLs of one destination"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := heraldspec.Parse(heraldspec.Destination{Name: tc.dest, URL: tc.url})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.says)
			require.NotContains(t, err.Error(), "hunter2")
			require.NotContains(t, err.Error(), "ter2")
			var se *heraldspec.Error
			require.ErrorAs(t, err, &se)
		})
	}
}

func TestParseShowsTheURLsWithoutSecrets(t *testing.T) {
	t.Parallel()
	// An '@' in a path or a query is the URL's own, not user information.
	q, err := heraldspec.Parse(heraldspec.Destination{Name: "hooks", URL: "echo://h/x?a=me@example.com#frag"})
	require.NoError(t, err)
	require.Equal(t, "echo://h/x?a=me@example.com", q.Display(), "no fragment")

	p, err := heraldspec.Parse(heraldspec.Destination{Name: "orders", URL: "echo://s3cret-token@a:4222, echo://u:pw-0042@b:4223?a=1"})
	require.NoError(t, err)
	require.Equal(t, "echo", p.Kind)
	require.Equal(t, "echo://xxxxx@a:4222,echo://u:xxxxx@b:4223?a=1", p.Display())
	require.Equal(t, []string{"a:4222", "b:4223"}, p.Hosts())
	require.Equal(t, []string{"s3cret-token"}, heraldspec.UserinfoSecrets("echo://s3cret-token@a:4222", true))
	require.Empty(t, heraldspec.UserinfoSecrets("echo://user@a:4222", false))
}

func TestEnvSecretsReadTheVariableOrItsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "password")
	require.NoError(t, os.WriteFile(file, []byte("from-file-0042\n"), 0o600))
	env := map[string]string{"HERALD_ORDERS_PASSWORD_FILE": file, "HERALD_HOOK_TOKEN": "from-env", "HERALD_BAD_PASSWORD_FILE": filepath.Join(dir, "missing")}
	getenv := func(name string) (string, bool) { v, ok := env[name]; return v, ok }

	p, err := heraldspec.Parse(heraldspec.Destination{Name: "orders", URL: "echo://h", Secrets: heraldspec.EnvSecrets("HERALD_ORDERS_", getenv)})
	require.NoError(t, err)
	require.Equal(t, "from-file-0042", p.Target().(*echoTarget).password)

	tok, err := heraldspec.EnvSecrets("HERALD_HOOK_", getenv).Secret(heraldspec.Token)
	require.NoError(t, err)
	require.Equal(t, "from-env", tok)
	require.Equal(t, "HERALD_HOOK_TOKEN", heraldspec.EnvSecrets("HERALD_HOOK_", getenv).Where(heraldspec.Token))

	_, err = heraldspec.Parse(heraldspec.Destination{Name: "bad", URL: "echo://h", Secrets: heraldspec.EnvSecrets("HERALD_BAD_", getenv)})
	require.ErrorContains(t, err, "HERALD_BAD_PASSWORD_FILE names "+filepath.Join(dir, "missing")+", which cannot be read")
}

func TestOpenSaysWhetherToTryAgain(t *testing.T) {
	t.Parallel()
	_, _, err := heraldspec.Open(context.Background(), heraldspec.Destination{Name: "orders", URL: "echo://u:pw-0042@h:1"})
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Unreachable)
	require.Equal(t, "cannot reach destination orders at echo://u:xxxxx@h:1: dial tcp: connection refused", err.Error())

	pub, closePub, err := heraldspec.Open(context.Background(), heraldspec.Destination{Name: "orders", URL: "echo://h:2"})
	require.NoError(t, err)
	require.NotNil(t, pub)
	closePub()
}

func TestRegisterRefusesASchemeTwice(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "heraldspec: scheme echo:// is registered twice", func() {
		heraldspec.Register(heraldspec.Scheme{Kind: "again", Schemes: []string{"echo"},
			Parse: func(*heraldspec.Destination, []*url.URL) (heraldspec.Target, error) { return nil, nil }})
	})
	require.True(t, strings.Contains(strings.Join(heraldspec.Schemes(), " "), "echos"))
}
