package heraldwebhook_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// secrets is a destination's secrets from a map, named as variables.
type secrets map[string]string

func (s secrets) Secret(what string) (string, error) { return s[what], nil }
func (s secrets) Where(what string) string           { return "HOOK_" + what }

// hunter2 is a valid signing secret whose text must never show.
var hunter2 = heraldwebhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("hunter2 hunter2 hunter2 hunter2!"))

func TestURLsTheWebhookPublisherTakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		config    *heraldwebhook.Config
		check     func(t *testing.T, c *heraldwebhook.URLConfig)
	}{
		{"TheWholeURLIsTheEndpoint", "https://u:pw@hooks.example.com:8443/services/T0/B0/XXXX?token=t", secrets{heraldspec.Secret: testSecret}, nil,
			func(t *testing.T, c *heraldwebhook.URLConfig) {
				require.Equal(t, "https://u:pw@hooks.example.com:8443/services/T0/B0/XXXX?token=t", c.Config.Default.URL)
				require.Equal(t, testSecret, c.Config.Default.Secret)
				require.Empty(t, c.Config.Default.PreviousSecret)
			}},
		{"ARollover", "http://hooks.example.com/in", secrets{heraldspec.Secret: otherSecret, heraldspec.PreviousSecret: testSecret}, nil,
			func(t *testing.T, c *heraldwebhook.URLConfig) {
				require.Equal(t, otherSecret, c.Config.Default.Secret)
				require.Equal(t, testSecret, c.Config.Default.PreviousSecret)
			}},
		{"TheConfigsSecretWithoutOneOfItsOwn", "https://hooks.example.com/in", nil,
			&heraldwebhook.Config{Secret: testSecret, Timeout: 3 * time.Second, AllowedNetworks: []string{"10.0.0.0/8"}},
			func(t *testing.T, c *heraldwebhook.URLConfig) {
				require.Empty(t, c.Config.Default.Secret)
				require.Equal(t, testSecret, c.Config.Secret)
				require.Equal(t, 3*time.Second, c.Config.Timeout)
			}},
		{"ALiteralAddressTheConfigAllows", "http://10.1.2.3:8080/in", secrets{heraldspec.Secret: testSecret},
			&heraldwebhook.Config{AllowedNetworks: []string{"10.0.0.0/8"}},
			func(t *testing.T, c *heraldwebhook.URLConfig) {
				require.Equal(t, []string{"10.0.0.0/8"}, c.Config.AllowedNetworks)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := heraldspec.Destination{Name: "hook", URL: tc.url}
			if tc.secrets != nil {
				d.Secrets = tc.secrets
			}
			if tc.config != nil {
				d.Config = tc.config
			}
			p, err := heraldspec.Parse(d)
			require.NoError(t, err)
			require.Equal(t, "webhook", p.Kind)
			require.NotContains(t, p.Display(), "/in", "the origin only")
			require.NotContains(t, p.Display(), "XXXX", "the origin only")
			tc.check(t, p.Target().(*heraldwebhook.URLConfig))
		})
	}
}

func TestURLsTheWebhookPublisherRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		config    any
		says      string
	}{
		{"NoSecret", "https://hooks.example.com/in", secrets{}, nil,
			"HOOK_SECRET is required: the whsec_... secret every webhook request is signed with"},
		{"NotAStandardWebhooksSecret", "https://hooks.example.com/in", secrets{heraldspec.Secret: "hunter2"}, nil,
			`HOOK_SECRET must start with "whsec_" (a Standard Webhooks secret)`},
		{"APreviousSecretAlone", "https://hooks.example.com/in", secrets{heraldspec.PreviousSecret: hunter2}, nil,
			"HOOK_PREVIOUS_SECRET goes with HOOK_SECRET, the secret that replaces it"},
		{"APreviousSecretThatIsTheSecret", "https://hooks.example.com/in", secrets{heraldspec.Secret: hunter2, heraldspec.PreviousSecret: hunter2}, nil,
			"HOOK_PREVIOUS_SECRET is the same as HOOK_SECRET; give the retiring secret"},
		{"ALoopbackAddress", "http://127.0.0.1:8080/in?token=hunter2", secrets{heraldspec.Secret: hunter2}, nil,
			"destination hook: refusing to connect to 127.0.0.1 (loopback address): allow it with Config.AllowedNetworks or Config.AllowPrivate"},
		{"AnAllowListEntryThatIsNoCIDR", "https://hooks.example.com/in", secrets{heraldspec.Secret: hunter2},
			&heraldwebhook.Config{AllowedNetworks: []string{"10.0.0.0/8", "hunter"}},
			`Config.AllowedNetworks[1]: "hunter" is not a CIDR prefix such as 10.0.0.0/8`},
		{"EndpointsInTheConfig", "https://hooks.example.com/in", secrets{heraldspec.Secret: hunter2},
			&heraldwebhook.Config{Endpoints: map[string]heraldwebhook.Endpoint{"orders": {URL: "https://a.example"}}},
			"Config.Endpoints and Config.Default are for New: a webhook destination posts every event to its URL"},
		{"AnotherPublishersConfig", "https://hooks.example.com/in", secrets{heraldspec.Secret: hunter2}, &struct{}{},
			"Config is a *struct {}, not a *heraldwebhook.Config"},
		{"TwoURLs", "https://a.example/x,https://b.example/y", secrets{heraldspec.Secret: hunter2}, nil,
			"a webhook destination takes one URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := heraldspec.Destination{Name: "hook", URL: tc.url, Config: tc.config}
			if tc.secrets != nil {
				d.Secrets = tc.secrets
			}
			_, err := heraldspec.Parse(d)
			require.ErrorContains(t, err, tc.says)
			require.NotContains(t, err.Error(), "hunter2")
			require.NotContains(t, err.Error(), strings.TrimPrefix(hunter2, heraldwebhook.SecretPrefix))
		})
	}
}

// Open builds a publisher that signs with the destination's secret and
// sends CloudEvents when the destination asks: a request reaches the
// receiver, which verifies it.
func TestAWebhookDestinationOpensAndPosts(t *testing.T) {
	t.Parallel()
	received := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := heraldwebhook.Verify(testSecret, r.Header, body, time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		received <- r.URL.RequestURI() + " " + r.Header.Get("ce-source")
	}))
	t.Cleanup(srv.Close)
	p, err := heraldspec.Parse(heraldspec.Destination{Name: "hook", URL: srv.URL + "/in?token=t",
		Secrets: secrets{heraldspec.Secret: testSecret}, Config: &heraldwebhook.Config{AllowedNetworks: loopback}})
	require.NoError(t, err)
	p.CloudEvents = &heraldce.Config{Source: "/orders"}
	pub, closePub, err := p.Open(context.Background())
	require.NoError(t, err)
	t.Cleanup(closePub)
	require.NoError(t, pub.Publish(t.Context(), []herald.Envelope{envelope("orders", "k", `{}`)}))
	require.Equal(t, "/in?token=t /orders", <-received)
}
