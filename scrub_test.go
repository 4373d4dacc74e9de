package herald_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

func TestScrubHidesCredentials(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"URLPassword", "dial nats://alice:s3cret@10.0.0.1:4222: refused", "dial nats://alice:xxxxx@10.0.0.1:4222: refused"},
		{"URLPasswordWithAtSign", "connect postgres://bob:p@ss@db/x failed", "connect postgres://bob:xxxxx@db/x failed"},
		{"URLPasswordWithSlash", `cannot parse "postgres://bob:ab/cd@db:5432/x": invalid port`, `cannot parse "postgres://bob:xxxxx@db:5432/x": invalid port`},
		{"URLPasswordInEveryURLOfALine", "nats://a:one@h1 nats://b:two@h2", "nats://a:xxxxx@h1 nats://b:xxxxx@h2"},
		{"PasswordEquals", "auth failed: password=opensesame user=x", "auth failed: password=xxxxx user=x"},
		{"TokenColon", "token: tok-123 rejected", "token: xxxxx rejected"},
		{"JSONSecret", `{"secret":"s3cr3t","user":"x"}`, `{"secret":"xxxxx","user":"x"}`},
		{"JSONTokenWithSpace", `{"token": "tok-123"}`, `{"token": "xxxxx"}`},
		{"JSONQuotedAgain", `body "{\"api_key\":\"k-123\"}"`, `body "{\"api_key\":\"xxxxx\"}"`},
		{"QuotedValueWithSpaces", "host=db password='a b c' dbname=x", "host=db password='xxxxx' dbname=x"},
		{"UnclosedQuoteEndsAtTheLine", "password='a b\nnext line", "password='xxxxx\nnext line"},
		{"QueryStringToken", "GET /x?access_token=abc123&page=2", "GET /x?access_token=xxxxx&page=2"},
		{"CompoundNameWithUnderscore", "client_secret=cs-1 aws_secret_access_key=ak-2", "client_secret=xxxxx aws_secret_access_key=xxxxx"},
		{"CompoundNameWithDash", "X-Api-Key: k-123", "X-Api-Key: xxxxx"},
		{"CamelCaseName", "{User:bob dbPassword:hunter2 secretKey:sk}", "{User:bob dbPassword:xxxxx secretKey:xxxxx"},
		{"UpperCaseName", "PGPASSWORD=hunter2 DB_PWD=pw2", "PGPASSWORD=xxxxx DB_PWD=xxxxx"},
		{"NameWithDigit", "password2=hunter2", "password2=xxxxx"},
		{"GoMap", "map[password:hunter2 user:bob]", "map[password:xxxxx user:bob]"},
		{"NULInsideName", "pass\x00word=hunter2", "password=xxxxx"},
		{"AuthorizationBearer", "Authorization: Bearer abc.def", "Authorization: Bearer xxxxx"},
		{"AuthorizationBasic", "Authorization: Basic dXNlcjpwdw==", "Authorization: Basic xxxxx"},
		{"AuthorizationEqualsBearer", "authorization=Bearer x", "authorization=Bearer xxxxx"},
		{"AuthorizationJSON", `{"Authorization":"Bearer x"}`, `{"Authorization":"Bearer xxxxx"}`},
		{"AuthorizationWithoutSeparator", "header Authorization Bearer abc.def missing", "header Authorization Bearer xxxxx missing"},
		{"ProxyAuthorizationBasic", "Proxy-Authorization: Basic dXNlcjpwdw==", "Proxy-Authorization: Basic xxxxx"},
		{"AuthorizationWithoutScheme", "Authorization: abc.def", "Authorization: xxxxx"},
		{"AuthorizationSchemeGluedToToken", "Authorization: Bearer-abc", "Authorization: xxxxx"},
		{"SchemeHiddenWithTheValueOfAnotherName", "token: Bearer abc.def", "token: xxxxx"},
		{"UnclosedQuoteRunningOverAnotherName", "password='abc token='def' end", "password='xxxxx'xxxxx' end"},
		{"MySQLDSN", "open root:hunter2@tcp(127.0.0.1:3306)/outbox: refused", "open root:xxxxx@tcp(127.0.0.1:3306)/outbox: refused"},
		{"MySQLDSNWithAtAndColon", "dsn root:p@ss:w/rd@tcp(db:3306)/x?parseTime=true", "dsn root:xxxxx@tcp(db:3306)/x?parseTime=true"},
		{"MySQLDSNOverASocket", `"app:hunter2@unix(/run/mysqld/mysqld.sock)/shop"`, `"app:xxxxx@unix(/run/mysqld/mysqld.sock)/shop"`},
		{"MySQLDSNWithoutAddress", "app:hunter2@/shop", "app:xxxxx@/shop"},
		{"MySQLURL", "mysql://app:hunter2@tcp(db:3306)/shop", "mysql://app:xxxxx@tcp(db:3306)/shop"},
		{"MySQLAccessDeniedAndDSN", "Error 1045 (28000): Access denied for user 'app'@'10.0.0.7' (using password: YES) dsn=app:hunter2@tcp(db)/shop",
			"Error 1045 (28000): Access denied for user 'app'@'10.0.0.7' (using password: YES) dsn=app:xxxxx@tcp(db)/shop"},
		{"PasswordYESOutsideMySQLsPhrase", "password: YES", "password: xxxxx"},
		{"KeywordDSNSpacesAroundEquals", "host=db password = 'a b' user=x", "host=db password = 'xxxxx' user=x"},
		{"KeywordDSNDoubleQuoted", `host=db password="a b" user=x`, `host=db password="xxxxx" user=x`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, herald.Scrub(tc.in))
		})
	}
}

func TestScrubKeepsOrdinaryText(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"plain error",
		"token required",
		"password the user gave is wrong",
		"secret the",
		"Token expired, log in again",
		"invalid bearer token",
		"3 tokens: too many",
		"secretary: Alice",
		"passwords: must match",
		"tokenizer: unexpected EOF",
		"pwdump = disabled",
		"open /etc/passwd: permission denied",
		`Post "https://auth.example.com/oauth/token": context deadline exceeded`,
		"panic at token.go:12: nil map",
		"reading secret.json: no such file",
		"https://example.com:8443/path",
		"nats://token@127.0.0.1:4222 unreachable",
		"Authorization required",
		"Authorization header missing",
		"Basic auth failed",
		"key=value a:b",
		"Error 1045: Access denied for user 'x'@'localhost' (using password: YES)",
		"Error 1045 (28000): Access denied for user 'root'@'172.17.0.1' (using password: NO)",
		"mysql://app@tcp(db:3306)/shop",
		"app@tcp(db:3306)/shop",
		"dial tcp 127.0.0.1:3306: connect: connection refused",
		"at 10:30 the job ran",
		"",
	} {
		t.Run(in, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, in, herald.Scrub(in))
		})
	}
}

func TestScrubCleansTextForStorage(t *testing.T) {
	t.Parallel()

	t.Run("NULBytesAreDropped", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "ab", herald.Scrub("a\x00b\x00"))
	})

	t.Run("BrokenUTF8IsReplaced", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "a?b", herald.Scrub("a\xffb"))
	})

	t.Run("LongTextIsCutAtARuneBoundary", func(t *testing.T) {
		t.Parallel()
		out := herald.Scrub("a" + strings.Repeat("é", 5000))
		require.True(t, utf8.ValidString(out))
		require.Equal(t, herald.MaxLastErrorLen-1, len(out), "the last whole rune before the cap is kept")
	})

	t.Run("ACredentialPastTheCapIsStillHidden", func(t *testing.T) {
		t.Parallel()
		// The URL starts before the cap and its '@' comes after it: cutting
		// first would leave "postgres://u:hunter2..." unrecognised.
		in := strings.Repeat("a", herald.MaxLastErrorLen-30) + " postgres://u:hunter2" + strings.Repeat("9", 40) + "@db/x"
		require.NotContains(t, herald.Scrub(in), "hunter2")
	})
}

// plantedForms are the shapes in which FuzzScrub plants a secret (%s).
var plantedForms = []string{
	"password=%s",
	"Password: %s",
	"token: %s",
	"pwd=%s",
	"api_key=%s",
	"X-Api-Key: %s",
	"access_token=%s",
	"clientSecret=%s",
	"PGPASSWORD=%s",
	`"secret":"%s"`,
	`{"token": "%s"}`,
	`{\"apiKey\":\"%s\"}`,
	"password='%s'",
	"map[passwd:%s]",
	"postgres://user:%s@db.internal:5432/outbox",
	"nats://relay:%s@127.0.0.1:4222",
	"Authorization: Bearer %s",
	"Authorization: Basic %s",
	"authorization=Bearer %s",
	`"Authorization":"Bearer %s"`,
	"Authorization Bearer %s",
	"Proxy-Authorization: Negotiate %s",
	"Authorization: %s",
	"password = '%s'",
	`password="%s"`,
	"host=db.internal password=%s dbname=outbox",
	"root:%s@tcp(127.0.0.1:3306)/outbox",
	"app:%s@unix(/run/mysqld/mysqld.sock)/outbox?parseTime=true",
	"app:%s@/outbox",
	"mysql://root:%s@tcp(db:3306)/outbox",
	`{"dsn":"root:%s@tcp(db:3306)/outbox"}`,
}

// mysqlForm reports whether a planted form is a Go MySQL driver DSN
// written without a scheme: user:%s@.
func mysqlForm(shape string) bool {
	return strings.Contains(shape, ":%s@") && !strings.Contains(shape, "://")
}

// ordinaryPhrases are error text that holds no secret, though some of it
// looks like a name and a value: FuzzScrub checks they come out whole in
// any text around them.
var ordinaryPhrases = []string{
	"Error 1045 (28000): Access denied for user 'x'@'localhost' (using password: YES)",
	"Error 1045: Access denied for user 'root'@'172.17.0.1' (using password: NO)",
	"token required",
	"password the user gave is wrong",
	"Token expired, log in again",
	"invalid bearer token",
	"open /etc/passwd: permission denied",
	`Post "https://auth.example.com/oauth/token": context deadline exceeded`,
	"panic at token.go:12: nil map",
	"reading secret.json: no such file",
	"https://example.com:8443/path",
	"nats://token@127.0.0.1:4222 unreachable",
	"Authorization required",
	"Basic auth failed",
	"dial tcp 127.0.0.1:3306: connect: connection refused",
	"mysql://app@tcp(db:3306)/shop",
	"key=value a:b",
	"at 10:30 the job ran",
}

// secretAlphabet holds the characters of a planted secret: those a bare
// value may hold, without 'x', which makes up the redaction mark.
const secretAlphabet = "abcdefghijklmnopqrstuvwyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~+/=:@!*$%"

// storable is s as Scrub keeps it before it looks for credentials.
func storable(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "?")
}

// requireStorable checks what Scrub promises of any output.
func requireStorable(t *testing.T, out string) {
	t.Helper()
	require.True(t, utf8.ValidString(out), "output is not valid UTF-8: %q", out)
	require.NotContains(t, out, "\x00")
	require.LessOrEqual(t, len(out), herald.MaxLastErrorLen)
}

// requireKept checks that Scrub left in alone, but for the cap.
func requireKept(t *testing.T, in string) {
	t.Helper()
	out := herald.Scrub(in)
	if len(in) <= herald.MaxLastErrorLen {
		require.Equal(t, in, out)
		return
	}
	require.True(t, strings.HasPrefix(in, out), "%q was changed into %q", in, out)
	require.Greater(t, len(out), herald.MaxLastErrorLen-utf8.UTFMax)
}

// FuzzScrub checks Scrub both ways. (a) A secret planted in any of the
// forms Scrub knows (plantedForms), with any text around it, never
// survives. (b) Text that holds no secret form comes out unchanged: text
// without ':', '=' and '@' and without the word "authorization" has no
// named value (a name needs ':' or '=' after it, or an authorization
// scheme), no URL password and no MySQL DSN (both need ':' and '@'); text
// without '@' that names no credential has none either; and an ordinary
// phrase between two such texts stays whole.
func FuzzScrub(f *testing.F) {
	f.Add("dial tcp: connection refused", "hunter2", "(retrying)", uint8(0))
	f.Add("token required", "tok-123", "", uint8(16))
	f.Add("password the", "dXNlcjpwdw==", "secret the", uint8(17))
	f.Add(`password='unclosed `, "s3cr3t", "'", uint8(12))
	f.Add("password=", "p@ss/w:rd", "@host/x", uint8(14))
	f.Add("Authorization:", "abc.def", "Bearer", uint8(20))
	f.Add("pass\x00word=", "hunter2", "\xff", uint8(3))
	f.Add(strings.Repeat("é", 1100), "hunter2", "tail", uint8(19))
	// MySQL: a DSN's password, and the "(using password: YES)" that is none.
	f.Add("Error 1045", "hunter2", "(using password: YES)", uint8(26))
	f.Add("dsn", "p@ss:w/rd", "@tcp(x)/y", uint8(27))
	f.Add("(using", "YES)", "", uint8(29))
	f.Add("open", "//hunter2", "", uint8(26))
	f.Add("connect", "ab@/cd", "", uint8(28))
	f.Add("connect", "hunter2", "", uint8(30))
	f.Fuzz(func(t *testing.T, prefix, secret, suffix string, form uint8) {
		requireStorable(t, herald.Scrub(prefix))

		// (b) Text without ':', '=' or '@', and without an authorization
		// name (no scheme counts then), is left alone.
		plain := storable(strings.NewReplacer(":", "", "=", "", "@", "").Replace(prefix))
		plainSuffix := storable(strings.NewReplacer(":", "", "=", "", "@", "").Replace(suffix))
		if !strings.Contains(strings.ToLower(plain), "authorization") {
			requireKept(t, plain)
			if !strings.Contains(strings.ToLower(plainSuffix), "authorization") {
				// So is an ordinary phrase in such text.
				requireKept(t, plain+" "+ordinaryPhrases[int(form)%len(ordinaryPhrases)]+" "+plainSuffix)
			}
		}
		// Nor does text that names no credential and holds no '@'.
		plain = storable(strings.ReplaceAll(prefix, "@", ""))
		if !secretWordIn(plain) {
			requireKept(t, plain)
		}

		// (a) A secret planted in any supported form, in any text, is hidden.
		secret = fromAlphabet(secret)
		prefix, suffix = storable(prefix), storable(suffix)
		shape := plantedForms[int(form)%len(plantedForms)]
		if len(secret) < 4 ||
			strings.Contains(prefix, secret) || strings.Contains(suffix, secret) ||
			strings.Contains(strings.Replace(shape, "%s", "xxxxx", 1), secret) {
			// The secret is found in the text around it: its absence from
			// the output could not be checked.
			return
		}
		if strings.HasPrefix(shape, "Authorization: %s") && isAuthScheme(secret) {
			// "Authorization: Basic" names a scheme, which stays visible;
			// the word after it is the credential.
			return
		}
		if mysqlForm(shape) && strings.HasPrefix(secret, "//") {
			// root://secret@tcp(...) is a URL with a user and no password.
			return
		}
		in := prefix + " " + strings.Replace(shape, "%s", secret, 1) + " " + suffix
		out := herald.Scrub(in)
		requireStorable(t, out)
		require.NotContains(t, out, secret, "Scrub(%q) = %q", in, out)
	})
}

// fromAlphabet maps the bytes of s onto secretAlphabet.
func fromAlphabet(s string) string {
	b := []byte(s)
	for i, c := range b {
		b[i] = secretAlphabet[int(c)%len(secretAlphabet)]
	}
	return string(b)
}

func isAuthScheme(s string) bool {
	for _, scheme := range []string{"bearer", "basic", "token", "negotiate", "ntlm"} {
		if strings.EqualFold(s, scheme) {
			return true
		}
	}
	return false
}

func secretWordIn(s string) bool {
	s = strings.ToLower(s)
	for _, w := range []string{"password", "passwd", "pwd", "secret", "token", "apikey", "api_key", "api-key", "authorization"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
