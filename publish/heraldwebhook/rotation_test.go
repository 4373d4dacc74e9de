package heraldwebhook_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// newSecret is the secret a rollover moves to; testSecret retires.
var newSecret = heraldwebhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("the secret that replaces it, 32b"))

// During a rollover every request carries two v1 signatures, the new
// secret's first: receivers on either secret accept it, and a receiver on
// a third one does not.
func TestSecretRollover(t *testing.T) {
	t.Parallel()

	t.Run("EveryRequestIsSignedUnderBothSecrets", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.rcv.secrets = map[string]string{"/new": newSecret, "/old": testSecret}
		p := b.publisher(t, &heraldwebhook.Config{
			Endpoints: map[string]heraldwebhook.Endpoint{
				// Its own pair; the other endpoint takes the Config's pair.
				"own": {URL: b.url("/new"), Secret: newSecret, PreviousSecret: testSecret},
			},
			Default: heraldwebhook.Endpoint{URL: b.url("/old")},
			Secret:  newSecret, PreviousSecret: testSecret, AllowedNetworks: loopback,
		})
		require.NoError(t, publish(t, p, envelope("own", "a", `{"n":1}`), envelope("other", "b", `{"n":2}`)))
		reqs := b.rcv.wait(t, 2, nil)
		for _, r := range reqs {
			sigs := strings.Fields(r.header.Get("webhook-signature"))
			require.Equal(t, []string{
				sign(t, newSecret, r.id(), r.header.Get("webhook-timestamp"), r.body),
				sign(t, testSecret, r.id(), r.header.Get("webhook-timestamp"), r.body),
			}, sigs, "the new secret's signature, then the previous one's, space-separated")
			for _, secret := range []string{newSecret, testSecret} {
				require.NoError(t, heraldwebhook.Verify(secret, r.header, r.body, time.Minute))
			}
			require.ErrorIs(t, heraldwebhook.Verify(otherSecret, r.header, r.body, time.Minute), heraldwebhook.ErrSignature)
		}
	})

	t.Run("WithoutAPreviousSecretThereIsOneSignature", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)
		require.NoError(t, publish(t, p, envelope("t", "a", "{}")))
		r := b.rcv.wait(t, 1, nil)[0]
		require.Equal(t, []string{sign(t, testSecret, r.id(), r.header.Get("webhook-timestamp"), r.body)},
			strings.Fields(r.header.Get("webhook-signature")))
	})

	t.Run("PreviousSecretIsChecked", func(t *testing.T) {
		t.Parallel()
		url := "https://hooks.example/in"
		for _, c := range []struct {
			cfg     heraldwebhook.Config
			message string
		}{
			{heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: url}, PreviousSecret: testSecret},
				"Config.PreviousSecret goes with Config.Secret"},
			{heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: url}, Secret: testSecret, PreviousSecret: testSecret},
				"Config.PreviousSecret is the same as Config.Secret"},
			{heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: url}, Secret: testSecret, PreviousSecret: "whsec_c2hvcnQ="},
				"Config.PreviousSecret must decode to a key"},
			{heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: url, PreviousSecret: testSecret}, Secret: newSecret},
				"Config.Default.PreviousSecret goes with Config.Default.Secret"},
			{heraldwebhook.Config{Endpoints: map[string]heraldwebhook.Endpoint{"t": {URL: url, Secret: newSecret, PreviousSecret: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}},
				`Config.Endpoints["t"].PreviousSecret must start with "whsec_"`},
		} {
			_, err := heraldwebhook.New(&c.cfg)
			require.ErrorContains(t, err, c.message)
			require.NotContains(t, err.Error(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
		}
	})

	t.Run("StringFormsSayOnlyThatThePreviousSecretIsSet", func(t *testing.T) {
		t.Parallel()
		cfg := heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: "https://hooks.example/in", Secret: newSecret, PreviousSecret: testSecret},
			Secret: newSecret, PreviousSecret: testSecret}
		for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
			text := fmt.Sprintf(verb, cfg)
			require.Contains(t, text, "PreviousSecret:set")
			for _, secret := range []string{testSecret, newSecret} {
				require.NotContains(t, text, strings.TrimPrefix(secret, "whsec_"))
			}
		}
	})
}

// VerifyAny is the receiver's side of a rollover: it holds both secrets and
// accepts a request signed under either, alone or with others.
func TestVerifyAny(t *testing.T) {
	t.Parallel()
	body := []byte(vectorBody)
	withSig := func(sigs ...string) http.Header { return vectorHeader(strings.Join(sigs, " ")) }
	underNew := sign(t, newSecret, vectorID, vectorTimestamp, body)
	underOther := sign(t, otherSecret, vectorID, vectorTimestamp, body)
	both := []string{testSecret, newSecret}

	t.Run("ASignatureUnderEitherSecretVerifies", func(t *testing.T) {
		t.Parallel()
		for _, h := range []http.Header{withSig(vectorSignature), withSig(underNew), withSig(underOther, underNew), withSig(underNew, vectorSignature)} {
			require.NoError(t, heraldwebhook.VerifyAnyAt(both, h, body, time.Minute, vectorTime))
			require.NoError(t, heraldwebhook.VerifyAnyAt([]string{newSecret, testSecret}, h, body, time.Minute, vectorTime))
		}
	})

	t.Run("ASignatureUnderNeitherFails", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, heraldwebhook.VerifyAnyAt(both, withSig(underOther), body, time.Minute, vectorTime), heraldwebhook.ErrSignature)
		require.ErrorIs(t, heraldwebhook.VerifyAnyAt(both, withSig(vectorSignature), []byte(vectorBody+" "), time.Minute, vectorTime), heraldwebhook.ErrSignature)
	})

	t.Run("EverySecretMustBeValidAndOneIsRequired", func(t *testing.T) {
		t.Parallel()
		require.ErrorContains(t, heraldwebhook.VerifyAnyAt(nil, withSig(vectorSignature), body, time.Minute, vectorTime), "a secret is required")
		err := heraldwebhook.VerifyAnyAt([]string{testSecret, "whsec_MfKQ9r8"}, withSig(vectorSignature), body, time.Minute, vectorTime)
		require.ErrorContains(t, err, "VerifyAny: secret 2 must decode to a key")
		require.NotContains(t, err.Error(), "MfKQ9r8")
	})

	t.Run("TheTimestampIsCheckedAsByVerify", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, heraldwebhook.VerifyAny(both, withSig(vectorSignature), body, time.Minute), heraldwebhook.ErrTimestamp)
	})
}
