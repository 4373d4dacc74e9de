package herald

import (
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxLastErrorLen caps the error text kept on a row.
const MaxLastErrorLen = 2048

// redacted stands in for what Scrub removes.
const redacted = "xxxxx"

var (
	// urlPassword is the user information of a URL, scheme://user:password@.
	// The password ends at the last '@' before the path; when no '@' comes
	// before the path it ends at the last '@' of the URL, because a password
	// that should have been percent-encoded may hold '/', '@' or ':', and a
	// driver that fails to parse such a URL echoes it whole. A URL in
	// running text ends at a space or a quote.
	urlPassword = regexp.MustCompile("([a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#\\s\"'<>`]*):(?:[^/?#\\s\"'<>`]*|[^\\s\"'<>`]*)@")
	// mysqlPassword is the password of a Go MySQL driver DSN,
	// user:password@tcp(host:3306)/db or user:password@/db (group 2). As
	// the driver reads it, the password runs to the last '@' before the
	// address, so it may hold ':', '@' and '/'.
	mysqlPassword = regexp.MustCompile("([^\\s:@/\"'<>`]*):([^\\s\"'<>`]*)@(?:[a-zA-Z][a-zA-Z0-9_]*\\(|/)")
	// secretWord finds the words that name a credential. It only finds
	// candidates: secretValue decides whether one is the name of a value.
	secretWord = regexp.MustCompile(`(?i)password|passwd|pwd|secret|token|api[_-]?key|authorization`)
	// authScheme is an HTTP authentication scheme followed by its
	// credential, as in "Authorization: Bearer abc.def". The scheme is one
	// word; the credential after it is the secret.
	authScheme = regexp.MustCompile(`(?i)^(?:bearer|basic|token|negotiate|ntlm)[ \t]+`)
)

// Scrub removes what looks like a credential from s and caps its length.
// It hides the password of a URL (scheme://user:xxxxx@host), the value
// after a name such as password, token, secret, api_key or Authorization
// followed by ':' or '=' (password=xxxxx, "token": "xxxxx",
// Authorization: Bearer xxxxx), and the credential after an authorization
// scheme (Authorization Bearer xxxxx). A name is a whole word or a part of
// a compound name (client_secret, X-Api-Key, dbPassword); words that only
// contain one (tokens, secretary) and names without a separator (token
// required) are left alone, so that error text stays readable. The relay
// runs every publish error through it before keeping it as a row's
// last_error or logging it.
func Scrub(s string) string {
	// The text is stored in a text column: no NUL, no broken UTF-8. This is
	// done first so that the patterns see the text that will be kept: a NUL
	// inside "pass\x00word" would otherwise hide the name, then vanish.
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "?")
	s = scrubURLPasswords(s)
	s = scrubMySQLPasswords(s)
	s = scrubNamedValues(s)
	// Capping last means that no credential is cut into a shape the
	// patterns no longer recognise (a URL whose '@' fell past the cap).
	if len(s) > MaxLastErrorLen {
		n := MaxLastErrorLen
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	return s
}

// scrubURLPasswords replaces the password of every scheme://user:password@
// in s.
func scrubURLPasswords(s string) string {
	return urlPassword.ReplaceAllString(s, "${1}:"+redacted+"@")
}

// scrubMySQLPasswords replaces the password of every
// user:password@tcp(address) and user:password@/db in s.
func scrubMySQLPasswords(s string) string {
	var b strings.Builder
	pos := 0
	for _, m := range mysqlPassword.FindAllStringSubmatchIndex(s, -1) {
		start, end := m[4], m[5]
		if rest, ok := strings.CutPrefix(s[start:end], "//"); ok {
			// mysql://user:password@tcp(host)/db is a URL: the user comes
			// first, and without a ':' after it there is no password.
			i := strings.IndexByte(rest, ':')
			if i < 0 {
				continue
			}
			start += len("//") + i + 1
		}
		if start == end {
			continue
		}
		b.WriteString(s[pos:start])
		b.WriteString(redacted)
		pos = end
	}
	if pos == 0 {
		return s
	}
	b.WriteString(s[pos:])
	return b.String()
}

// scrubNamedValues replaces the value of every name that names a
// credential.
func scrubNamedValues(s string) string {
	v := newValueFinder(s)
	var hide [][2]int
	// A name holds more than one word when it is compound
	// (token-authorization): each word's verdict depends only on where the
	// name ends and whether the word is "authorization", so a name is
	// judged at most twice however many words it holds.
	lastEnd, judged := -1, [2]bool{}
	for _, w := range secretWord.FindAllStringIndex(s, -1) {
		i, j := w[0], w[1]
		if !startsName(s, i) || !endsNamePart(s, j) || mysqlUsingPassword(s, i, j) {
			continue
		}
		// The word may be the first part of a longer name: secret_key,
		// token-type, passwordHash.
		k := v.name.next(j)
		auth := strings.EqualFold(s[i:j], "authorization")
		if k != lastEnd {
			lastEnd, judged = k, [2]bool{}
		}
		if judged[b2i(auth)] {
			continue
		}
		judged[b2i(auth)] = true
		if start, end, ok := v.valueAfterName(k, auth); ok {
			hide = append(hide, [2]int{start, end})
		}
	}
	if len(hide) == 0 {
		return s
	}
	// Every name is judged on its own, so one value may hold the next:
	// an unclosed quote (password='abc token='def') runs over a later name
	// whose own value starts inside it. Hiding the union of the values
	// covers both.
	slices.SortFunc(hide, func(a, b [2]int) int { return a[0] - b[0] })
	var b strings.Builder
	pos := 0
	for i := 0; i < len(hide); {
		start, end := hide[i][0], hide[i][1]
		for i++; i < len(hide) && hide[i][0] <= end; i++ {
			end = max(end, hide[i][1])
		}
		b.WriteString(s[pos:start])
		b.WriteString(redacted)
		pos = end
	}
	b.WriteString(s[pos:])
	return b.String()
}

// valueFinder finds the values that follow names in s.
type valueFinder struct {
	s      string
	name   stopFinder // the end of a name
	bare   stopFinder // the end of an unquoted value
	double stopFinder // the end of a value in double quotes
	single stopFinder // the end of a value in single quotes
}

func newValueFinder(s string) *valueFinder {
	return &valueFinder{
		s: s,
		name: newStopFinder(s, func(c byte) bool {
			return !isAlnum(c) && c != '_' && c != '-'
		}),
		// An unquoted value ends at a space, a quote, or a character that
		// separates parameters in a query string or a connection string.
		bare: newStopFinder(s, func(c byte) bool {
			return strings.IndexByte(" \t\n\v\f\r\"'&,;", c) >= 0
		}),
		// A quoted value ends at its closing quote, or at the end of the
		// line if it has none.
		double: newStopFinder(s, func(c byte) bool { return c == '"' || c == '\n' || c == '\r' }),
		single: newStopFinder(s, func(c byte) bool { return c == '\'' || c == '\n' || c == '\r' }),
	}
}

// valueAfterName returns where the value lies of the name that ends at
// s[k], if it has one.
func (v *valueFinder) valueAfterName(k int, auth bool) (start, end int, ok bool) {
	s := v.s
	p := skipBlanks(s, skipQuote(s, k))
	if p < len(s) && (s[p] == ':' || s[p] == '=') {
		return v.valueAt(skipBlanks(s, p+1), auth)
	}
	// Without a separator only a scheme makes the next word a credential:
	// "Authorization Bearer abc". Anything else is prose ("token
	// required").
	if !auth || p == k {
		return 0, 0, false
	}
	m := authScheme.FindStringIndex(s[p:])
	if m == nil {
		return 0, 0, false
	}
	start = p + m[1]
	end = v.bare.next(start)
	return start, end, end > start
}

// mysqlUsingPassword reports whether the name s[i:j] is the one of MySQL's
// "Access denied for user 'u'@'host' (using password: YES)", whose YES or
// NO only says whether a password was sent.
func mysqlUsingPassword(s string, i, j int) bool {
	return s[i:j] == "password" && strings.HasSuffix(s[:i], "(using ") &&
		(strings.HasPrefix(s[j:], ": YES)") || strings.HasPrefix(s[j:], ": NO)"))
}

// startsName reports whether the word at s[i] starts a name or a part of
// one: it follows a character that is not a letter or digit (token,
// client_secret, X-Api-Key) or it starts with an upper-case letter after a
// letter or digit (dbPassword, PGPASSWORD). A lower-case word glued to the
// letters before it is part of another word. After '/' the word is part of
// a path (/etc/passwd: permission denied, POST "https://host/oauth/token":
// timeout), not a name.
func startsName(s string, i int) bool {
	if i == 0 {
		return true
	}
	c := s[i-1]
	switch {
	case c == '/':
		return false
	case !isAlnum(c):
		return true
	}
	return isUpper(s[i])
}

// endsNamePart reports whether the word ending before s[j] ends a part of
// a name: what follows is not a letter (tokens, secretary, pwdump are other
// words), unless it is a digit (password2) or starts the next part of a
// camel-case name (secretKey).
func endsNamePart(s string, j int) bool {
	if j == len(s) || !isAlnum(s[j]) || isDigit(s[j]) {
		return true
	}
	return isLower(s[j-1]) && isUpper(s[j])
}

// valueAt returns the part to hide of the value that starts at s[p]. For an
// authorization, a leading scheme stays visible: it tells the operator
// which kind of credential was sent, and it is no secret. For any other
// name the whole value is hidden, so that a password that happens to be
// "Basic" is not shown.
func (v *valueFinder) valueAt(p int, auth bool) (start, end int, ok bool) {
	s := v.s
	// A quoted value runs to its closing quote, spaces and all
	// (password='a b c').
	if q := quoteAt(s, p); q != "" {
		start = p + len(q)
		if strings.HasSuffix(q, `"`) {
			end = v.double.next(start)
		} else {
			end = v.single.next(start)
		}
		// \"token\":\"abc\" closes with a backslash and a quote.
		if len(q) == 2 && end > start && end < len(s) && s[end-1] == '\\' {
			end--
		}
		if m := authScheme.FindStringIndex(s[start:end]); auth && m != nil && start+m[1] < end {
			start += m[1]
		}
		return start, end, end > start
	}
	start = p
	if m := authScheme.FindStringIndex(s[p:]); m != nil {
		if end = v.bare.next(p + m[1]); end > p+m[1] {
			if auth {
				start = p + m[1]
			}
			return start, end, true
		}
	}
	end = v.bare.next(p)
	return start, end, end > start
}

// stopFinder finds the next stop byte in s at or after a position. It
// keeps its last answer and reuses it for the positions it covers: Scrub
// asks about positions that grow, so s is scanned about once, where text
// made of many names whose values all run to its end
// ("password=password=...") would otherwise take quadratic time.
type stopFinder struct {
	s    string
	stop func(byte) bool
	// No stop byte is in s[from:at]; s[at] is one, or at is len(s).
	from, at int
}

func newStopFinder(s string, stop func(byte) bool) stopFinder {
	return stopFinder{s: s, stop: stop, from: 0, at: -1}
}

func (f *stopFinder) next(p int) int {
	if p < f.from || p > f.at {
		f.from, f.at = p, p
		for f.at < len(f.s) && !f.stop(f.s[f.at]) {
			f.at++
		}
	}
	return f.at
}

// quoteAt returns the quote that opens a value at s[p]: ' or ", or \' or \"
// in text that was quoted again (a JSON body in an error formatted with
// %q).
func quoteAt(s string, p int) string {
	rest := s[p:]
	for _, q := range []string{`"`, `'`, `\"`, `\'`} {
		if strings.HasPrefix(rest, q) {
			return q
		}
	}
	return ""
}

// skipQuote skips the quote that closes a quoted name ("token": or
// \"token\":).
func skipQuote(s string, p int) int {
	if q := quoteAt(s, p); q != "" {
		return p + len(q)
	}
	return p
}

func skipBlanks(s string, p int) int {
	for p < len(s) && (s[p] == ' ' || s[p] == '\t') {
		p++
	}
	return p
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlnum(c byte) bool { return isUpper(c) || isLower(c) || isDigit(c) }
