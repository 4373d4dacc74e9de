package heraldpubsub_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
)

// env is an environment as a Destination's Getenv reads it.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestURLsThePubSubPublisherTakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		env       map[string]string
		config    *heraldpubsub.Config
		check     func(t *testing.T, c *heraldpubsub.URLConfig)
	}{
		{"AProject", "pubsub://my-project", nil, nil, func(t *testing.T, c *heraldpubsub.URLConfig) {
			require.Equal(t, "my-project", c.Config.Project)
			require.Empty(t, c.Emulator, "Google Cloud")
			require.Empty(t, c.Config.TopicPrefix)
		}},
		{"AnEmulatorAndAPrefix", "pubsub://p?emulator=localhost:8085&prefix=prod-", nil, nil, func(t *testing.T, c *heraldpubsub.URLConfig) {
			require.Equal(t, "p", c.Config.Project, "an emulator takes any name")
			require.Equal(t, "localhost:8085", c.Emulator)
			require.Equal(t, "prod-", c.Config.TopicPrefix)
		}},
		{"TheEmulatorOfTheEnvironment", "pubsub://P_1", map[string]string{"PUBSUB_EMULATOR_HOST": "localhost:8085"}, nil,
			func(t *testing.T, c *heraldpubsub.URLConfig) { require.Equal(t, "localhost:8085", c.Emulator) }},
		{"TheURLsEmulatorWins", "pubsub://p?emulator=127.0.0.1:9", map[string]string{"PUBSUB_EMULATOR_HOST": "localhost:8085"}, nil,
			func(t *testing.T, c *heraldpubsub.URLConfig) { require.Equal(t, "127.0.0.1:9", c.Emulator) }},
		{"TheURLOverridesTheConfig", "pubsub://my-project?prefix=prod-", nil,
			&heraldpubsub.Config{Project: "other-project", TopicPrefix: "dev-", Timeout: 3 * time.Second},
			func(t *testing.T, c *heraldpubsub.URLConfig) {
				require.Equal(t, "my-project", c.Config.Project)
				require.Equal(t, "prod-", c.Config.TopicPrefix)
				require.Equal(t, 3*time.Second, c.Config.Timeout)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := heraldspec.Destination{Name: "gcp", URL: tc.url, Getenv: env(tc.env)}
			if tc.config != nil {
				d.Config = tc.config
			}
			p, err := heraldspec.Parse(d)
			require.NoError(t, err)
			require.Equal(t, "pubsub", p.Kind)
			tc.check(t, p.Target().(*heraldpubsub.URLConfig))
		})
	}
}

func TestURLsThePubSubPublisherRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		config    any
		ce        *heraldce.Config
		says      string
	}{
		{"AShortNameWithoutAnEmulator", "pubsub://p", nil, nil,
			`"p" is not a Google Cloud project ID (6 to 30 lower-case letters, digits and hyphens, starting with a letter); ` +
				"an emulator takes any name: set PUBSUB_EMULATOR_HOST or add ?emulator=HOST:PORT"},
		{"NotAProjectID", "pubsub://My_Project", nil, nil, `"My_Project" is not a Google Cloud project ID`},
		{"AnEmulatorWithoutAPort", "pubsub://my-project?emulator=localhost", nil, nil, `emulator="localhost" is not HOST:PORT`},
		{"APort", "pubsub://my-project:8085", nil, nil, "pubsub://PROJECT takes no port: give an emulator as ?emulator=HOST:PORT"},
		{"APath", "pubsub://my-project/orders", nil, nil, "pubsub://PROJECT takes no path: give a topic prefix as ?prefix=PREFIX"},
		{"UserInformation", "pubsub://key:hunter2@my-project", nil, nil,
			"pubsub:// takes no user information: credentials come from Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS)"},
		{"UnknownOption", "pubsub://my-project?endpoint=x:1", nil, nil,
			`pubsub:// option "endpoint" is not supported: use emulator=HOST:PORT or prefix=PREFIX`},
		{"OptionTwice", "pubsub://my-project?prefix=a-&prefix=b-", nil, nil, "pubsub:// option prefix is given 2 times"},
		{"APrefixWithASpace", "pubsub://my-project?prefix=a%20b", nil, nil, "prefix "},
		{"AConfigThePublisherRefuses", "pubsub://my-project", &heraldpubsub.Config{MaxMessageBytes: -1}, nil,
			"Config.MaxMessageBytes must be between 1 and"},
		{"AnotherPublishersConfig", "pubsub://my-project", &struct{}{}, nil, "Config is a *struct {}, not a *heraldpubsub.Config"},
		{"BadCloudEvents", "pubsub://my-project", nil, &heraldce.Config{Source: "/s", Mode: "both"}, "Config.CloudEvents.Mode"},
		{"TwoURLs", "pubsub://my-project,pubsub://other-project", nil, nil, "a pubsub destination takes one URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := heraldspec.Parse(heraldspec.Destination{Name: "gcp", URL: tc.url, Config: tc.config, CloudEvents: tc.ce,
				Getenv: env(nil)})
			require.ErrorContains(t, err, tc.says)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// A pubsub:// destination opens against Google's emulator, from the
// URL's emulator= or the environment's PUBSUB_EMULATOR_HOST, and its
// publisher publishes there.
func TestAPubSubDestinationOpensAndPublishes(t *testing.T) {
	t.Parallel()
	addr := testenv.PubSubEmulator(t)
	ctx := t.Context()
	client, err := heraldpubsub.NewClient(ctx, "herald-url", heraldpubsub.EmulatorOptions(addr)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	_, err = client.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: "projects/herald-url/topics/url-orders"})
	require.NoError(t, err)
	_, err = client.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{
		Name: "projects/herald-url/subscriptions/read", Topic: "projects/herald-url/topics/url-orders"})
	require.NoError(t, err)

	for _, d := range []heraldspec.Destination{
		{Name: "gcp", URL: "pubsub://herald-url?prefix=url-&emulator=" + addr, Getenv: env(nil)},
		{Name: "gcp", URL: "pubsub://herald-url?prefix=url-", Getenv: env(map[string]string{"PUBSUB_EMULATOR_HOST": addr})},
	} {
		pub, closePub, err := heraldspec.Open(ctx, d)
		require.NoError(t, err, d.URL)
		envs := batch(t, herald.Message{Topic: "orders", Key: "k", Payload: []byte(d.URL)})
		require.NoError(t, pub.Publish(ctx, envs))
		closePub()

		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := client.SubscriptionAdminClient.Pull(pctx, &pb.PullRequest{Subscription: "projects/herald-url/subscriptions/read", MaxMessages: 1})
		cancel()
		require.NoError(t, err)
		require.Len(t, out.ReceivedMessages, 1)
		m := out.ReceivedMessages[0].Message
		got, err := heraldpubsub.Parse(&pubsub.Message{Data: m.Data, Attributes: m.Attributes})
		require.NoError(t, err)
		require.Equal(t, envs[0].ID, got.ID)
		require.Equal(t, d.URL, string(got.Payload))
		require.NoError(t, client.SubscriptionAdminClient.Acknowledge(ctx, &pb.AcknowledgeRequest{
			Subscription: "projects/herald-url/subscriptions/read", AckIds: []string{out.ReceivedMessages[0].AckId}}))
	}
}

// A service that does not answer is waited for; one that refuses the
// credentials is not. The emulator takes no credentials, so pstest
// answers Unauthenticated in its place.
func TestAPubSubDestinationDownIsUnreachableAndRefusedCredentialsAreNot(t *testing.T) {
	t.Parallel()
	refusing := pstest.NewServer(pstest.ServerReactorOption{FuncName: "ListTopics", Reactor: unauthenticated{}})
	t.Cleanup(func() { _ = refusing.Close() })
	for _, tc := range []struct {
		url         string
		unreachable bool
		says        string
	}{
		{"pubsub://herald-url?emulator=127.0.0.1:1", true, "cannot reach destination gcp at pubsub://herald-url?emulator=127.0.0.1:1: "},
		{"pubsub://herald-url?emulator=" + refusing.Addr, false, "destination gcp at pubsub://herald-url?emulator=" + refusing.Addr +
			" refused the credentials: "},
	} {
		_, _, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "gcp", URL: tc.url, Getenv: env(nil), ConnectTimeout: 3 * time.Second})
		var oe *heraldspec.OpenError
		require.ErrorAs(t, err, &oe, tc.url)
		require.Equal(t, tc.unreachable, oe.Unreachable, "%v", err)
		require.Contains(t, err.Error(), tc.says)
	}
}

// unauthenticated is a pstest reactor that refuses every ListTopics as
// Pub/Sub refuses credentials it does not take.
type unauthenticated struct{}

func (unauthenticated) React(req any) (bool, any, error) {
	if _, ok := req.(*pb.ListTopicsRequest); !ok {
		return false, nil, nil
	}
	return true, &pb.ListTopicsResponse{}, status.Error(codes.Unauthenticated, "request had invalid authentication credentials")
}
