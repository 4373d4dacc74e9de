package heraldwebhook_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// The test vector of the Standard Webhooks reference libraries.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = "1614265330"
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var vectorTime = time.Unix(1614265330, 0)

func vectorHeader(sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", vectorTimestamp)
	h.Set("webhook-signature", sig)
	return h
}

func TestVerify(t *testing.T) {
	t.Parallel()

	t.Run("TheSpecificationsTestVectorVerifies", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, heraldwebhook.VerifyAt(vectorSecret, vectorHeader(vectorSignature), []byte(vectorBody), time.Minute, vectorTime))
	})

	t.Run("OurSignatureOfTheVectorIsTheVectorsSignature", func(t *testing.T) {
		t.Parallel()
		// Sign through the package's own signing path: a 2xx publisher
		// request is verified in the receiver; here the bytes must match.
		require.Equal(t, vectorSignature, sign(t, vectorSecret, vectorID, vectorTimestamp, []byte(vectorBody)))
	})

	t.Run("TamperedBodyIDOrTimestampFails", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, heraldwebhook.VerifyAt(vectorSecret, vectorHeader(vectorSignature), []byte(`{"test": 2432232315}`), time.Minute, vectorTime), heraldwebhook.ErrSignature)
		h := vectorHeader(vectorSignature)
		h.Set("webhook-id", vectorID+"x")
		require.ErrorIs(t, heraldwebhook.VerifyAt(vectorSecret, h, []byte(vectorBody), time.Minute, vectorTime), heraldwebhook.ErrSignature)
		h = vectorHeader(vectorSignature)
		h.Set("webhook-timestamp", "1614265331")
		require.ErrorIs(t, heraldwebhook.VerifyAt(vectorSecret, h, []byte(vectorBody), time.Minute, vectorTime), heraldwebhook.ErrSignature)
	})

	t.Run("AnotherSecretFails", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, heraldwebhook.VerifyAt(otherSecret, vectorHeader(vectorSignature), []byte(vectorBody), time.Minute, vectorTime), heraldwebhook.ErrSignature)
	})

	t.Run("TimestampOutsideTheToleranceFailsInBothDirections", func(t *testing.T) {
		t.Parallel()
		h, body := vectorHeader(vectorSignature), []byte(vectorBody)
		require.NoError(t, heraldwebhook.VerifyAt(vectorSecret, h, body, 5*time.Minute, vectorTime.Add(299*time.Second)))
		require.NoError(t, heraldwebhook.VerifyAt(vectorSecret, h, body, 5*time.Minute, vectorTime.Add(-299*time.Second)))
		require.ErrorIs(t, heraldwebhook.VerifyAt(vectorSecret, h, body, 5*time.Minute, vectorTime.Add(301*time.Second)), heraldwebhook.ErrTimestamp)
		require.ErrorIs(t, heraldwebhook.VerifyAt(vectorSecret, h, body, 5*time.Minute, vectorTime.Add(-301*time.Second)), heraldwebhook.ErrTimestamp)
		// Zero means the default of five minutes.
		require.ErrorIs(t, heraldwebhook.VerifyAt(vectorSecret, h, body, 0, vectorTime.Add(6*time.Minute)), heraldwebhook.ErrTimestamp)
		require.NoError(t, heraldwebhook.VerifyAt(vectorSecret, h, body, 0, vectorTime.Add(4*time.Minute)))
		// Verify uses the real clock: the 2021 vector is far too old.
		require.ErrorIs(t, heraldwebhook.Verify(vectorSecret, h, body, time.Hour), heraldwebhook.ErrTimestamp)
	})

	t.Run("NonNumericTimestampFails", func(t *testing.T) {
		t.Parallel()
		h := vectorHeader(vectorSignature)
		h.Set("webhook-timestamp", "2021-02-25T15:02:10Z")
		require.ErrorIs(t, heraldwebhook.VerifyAt(vectorSecret, h, []byte(vectorBody), time.Minute, vectorTime), heraldwebhook.ErrTimestamp)
	})

	t.Run("OneMatchingSignatureOfSeveralIsEnough", func(t *testing.T) {
		t.Parallel()
		rotated := sign(t, otherSecret, vectorID, vectorTimestamp, []byte(vectorBody))
		for _, sigs := range []string{
			rotated + " " + vectorSignature,
			"v1a,AAAA " + vectorSignature,
			"v1,not-base64!! " + vectorSignature,
		} {
			require.NoErrorf(t, heraldwebhook.VerifyAt(vectorSecret, vectorHeader(sigs), []byte(vectorBody), time.Minute, vectorTime), "header %q", sigs)
		}
		// The right bytes under another scheme's label do not count.
		v1a := "v1a," + strings.TrimPrefix(vectorSignature, "v1,")
		require.ErrorIs(t, heraldwebhook.VerifyAt(vectorSecret, vectorHeader(v1a+" "+rotated), []byte(vectorBody), time.Minute, vectorTime), heraldwebhook.ErrSignature)
	})

	t.Run("MissingHeadersFail", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			h := vectorHeader(vectorSignature)
			h.Del(name)
			err := heraldwebhook.VerifyAt(vectorSecret, h, []byte(vectorBody), time.Minute, vectorTime)
			require.ErrorIs(t, err, heraldwebhook.ErrMissingHeader, name)
			require.ErrorContains(t, err, name)
		}
	})

	t.Run("BadSecretsFailWithoutEchoingThem", func(t *testing.T) {
		t.Parallel()
		for _, secret := range []string{
			"",
			"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",   // no prefix
			"whsec_SECRETPART*not*base64*at*all", // not base64
			"whsec_U0VDUkVUUEFSVA==",             // 10 bytes: too short
		} {
			err := heraldwebhook.VerifyAt(secret, vectorHeader(vectorSignature), []byte(vectorBody), time.Minute, vectorTime)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "SECRETPART")
			require.NotContains(t, err.Error(), "MfKQ9r8GKYqr")
			require.NotContains(t, err.Error(), "U0VDUkVUUEFSVA")
		}
	})
}
