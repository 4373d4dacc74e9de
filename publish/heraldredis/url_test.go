package heraldredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldredis"
)

// secrets is a destination's secrets from a map, named as variables.
type secrets map[string]string

func (s secrets) Secret(what string) (string, error) { return s[what], nil }
func (s secrets) Where(what string) string           { return "ORDERS_" + what }

func TestURLsTheRedisPublisherTakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		check     func(t *testing.T, c *heraldredis.URLConfig)
	}{
		{"Plain", "redis://127.0.0.1:6379", func(t *testing.T, c *heraldredis.URLConfig) {
			require.Equal(t, "127.0.0.1:6379", c.Options.Addr)
			require.Nil(t, c.Options.TLSConfig)
			require.Zero(t, c.Config.MaxLen)
		}},
		{"DatabaseAndClientOptions", "redis://u:pw@h:6380/3?client_name=relay&dial_timeout=2s&pool_size=4", func(t *testing.T, c *heraldredis.URLConfig) {
			require.Equal(t, 3, c.Options.DB)
			require.Equal(t, "u", c.Options.Username)
			require.Equal(t, "pw", c.Options.Password)
			require.Equal(t, "relay", c.Options.ClientName)
			require.Equal(t, 2*time.Second, c.Options.DialTimeout)
			require.Equal(t, 4, c.Options.PoolSize)
		}},
		{"MaxLen", "redis://h?maxlen=1000", func(t *testing.T, c *heraldredis.URLConfig) { require.EqualValues(t, 1000, c.Config.MaxLen) }},
		{"TLSWithTheSystemRoots", "rediss://h", func(t *testing.T, c *heraldredis.URLConfig) {
			require.NotNil(t, c.Options.TLSConfig)
			require.Equal(t, "h", c.Options.TLSConfig.ServerName)
			require.False(t, c.Options.TLSConfig.InsecureSkipVerify)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := heraldspec.Parse(heraldspec.Destination{Name: "orders", URL: tc.url})
			require.NoError(t, err)
			require.Equal(t, "redis", p.Kind)
			tc.check(t, p.Target().(*heraldredis.URLConfig))
		})
	}
}

func TestURLsTheRedisPublisherRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		says      string
	}{
		{"UnknownOption", "redis://h?stream=x", nil, `option "stream" is not known: a redis(s):// URL takes maxlen, ca_file, cert_file, key_file`},
		{"SkipVerify", "rediss://h?skip_verify=true", nil, "option skip_verify is refused: Herald verifies the server's certificate"},
		{"OptionTwice", "redis://h?maxlen=1&maxlen=2", nil, "option maxlen is given twice"},
		{"MaxLenNotANumber", "redis://h?maxlen=-3", nil, `maxlen="-3" is not a positive number`},
		{"TLSFilesWithoutTLS", "redis://h?ca_file=/ca.pem", nil, "ca_file, cert_file and key_file are for rediss:// (TLS) only"},
		{"UnreadableCA", "rediss://h?ca_file=/nonexistent/ca.pem", nil, "ca_file=/nonexistent/ca.pem: cannot read it: no such file or directory"},
		{"CertWithoutKey", "rediss://h?cert_file=/c.pem", nil, "cert_file and key_file go together"},
		{"BadDatabase", "redis://u:hunter2@h/notadb", nil, `invalid database number`},
		{"TwoPasswords", "redis://u:hunter2@h", secrets{heraldspec.Password: "other-0042"}, "the URL holds a password and ORDERS_PASSWORD is set; give one"},
		{"TwoURLs", "redis://a,redis://b", nil, "a redis destination takes one URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := heraldspec.Destination{Name: "orders", URL: tc.url}
			if tc.secrets != nil {
				d.Secrets = tc.secrets
			}
			_, err := heraldspec.Parse(d)
			require.ErrorContains(t, err, tc.says)
			require.NotContains(t, err.Error(), "hunter2")
			require.NotContains(t, err.Error(), "other-0042")
		})
	}
}

func TestTheRedisURLsPasswordMayComeFromSecrets(t *testing.T) {
	t.Parallel()
	p, err := heraldspec.Parse(heraldspec.Destination{Name: "orders", URL: "redis://relay@h", Secrets: secrets{heraldspec.Password: "pw-0042"}})
	require.NoError(t, err)
	c := p.Target().(*heraldredis.URLConfig)
	require.Equal(t, "relay", c.Options.Username)
	require.Equal(t, "pw-0042", c.Options.Password)
}

func TestARedisDestinationThatIsDownIsUnreachable(t *testing.T) {
	t.Parallel()
	_, _, err := heraldspec.Open(context.Background(), heraldspec.Destination{Name: "orders", URL: "redis://u:hunter2@127.0.0.1:1", ConnectTimeout: time.Second})
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Unreachable, "%v", err)
	require.Contains(t, err.Error(), "cannot reach destination orders at redis://u:xxxxx@127.0.0.1:1: ")
	require.NotContains(t, err.Error(), "hunter2")
}
