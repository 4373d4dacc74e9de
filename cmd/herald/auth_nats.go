package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// The options of a nats:// (tls://, ws://, wss://) destination, besides
// the user information (nats://USER:PASSWORD@, nats://TOKEN@, or
// nats://USER@ with the password in the destination's PASSWORD variable;
// a token may come from its TOKEN variable instead):
//
//	creds_file  a credentials file (user JWT and nkey seed, from nsc)
//	nkey_file   a file holding an nkey user seed (SU...)
//	ca_file, cert_file, key_file: TLS (destination_secrets.go)
//
// One way to authenticate: a credentials file, an nkey, a user and
// password, or a token. Herald's options are taken out of the URLs before
// they reach the NATS client.
const optCredsFile, optNkeyFile = "creds_file", "nkey_file"

var natsOptions = append([]string{optCredsFile, optNkeyFile}, tlsOptions...)

// natsAuth is how the daemon connects to a NATS destination.
type natsAuth struct {
	urls string // the server URLs without user information or Herald's options
	opts []nats.Option
}

// natsDestination reads a NATS destination's options and secrets into the
// client's options, refusing what it does not know.
func natsDestination(inv *invocation, label string, ep endpoint) (*natsAuth, error) {
	fail := func(format string, args ...any) (*natsAuth, error) {
		return nil, usagef("%s: "+format, append([]any{label}, args...)...)
	}
	us, err := destinationURLs(ep)
	if err != nil {
		return fail("%v", err)
	}
	opts, err := destinationOptions("nats://", us, natsOptions)
	if err != nil {
		return fail("%v", err)
	}
	user, err := destinationUser(us)
	if err != nil {
		return fail("%v", err)
	}
	password, err := destinationSecret(inv, ep, "PASSWORD")
	if err != nil {
		return nil, err
	}
	token, err := destinationSecret(inv, ep, "TOKEN")
	if err != nil {
		return nil, err
	}
	passwordEnv, tokenEnv := ep.secretEnv("PASSWORD"), ep.secretEnv("TOKEN")
	a := &natsAuth{}
	var ways []string // the ways to authenticate given, to refuse two
	if user != nil {
		urlPassword, hasPassword := user.Password()
		switch {
		case hasPassword && password != "":
			return fail("the URL holds a password and %s is set: give one (the variable keeps it out of the process list)", passwordEnv)
		case hasPassword:
			a.opts, ways = append(a.opts, nats.UserInfo(user.Username(), urlPassword)), append(ways, "a user and password")
		case password != "":
			a.opts, ways = append(a.opts, nats.UserInfo(user.Username(), password)), append(ways, "a user and password")
		default: // nats://TOKEN@host
			a.opts, ways = append(a.opts, nats.Token(user.Username())), append(ways, "a token in the URL")
		}
	} else if password != "" {
		return fail("%s is set but the URL names no user: nats://USER@HOST:PORT", passwordEnv)
	}
	if token != "" {
		a.opts, ways = append(a.opts, nats.Token(token)), append(ways, tokenEnv)
	}
	if path := opts[optCredsFile]; path != "" {
		if err := checkCredsFile(inv, path); err != nil {
			return fail("%v", err)
		}
		a.opts, ways = append(a.opts, nats.UserCredentials(path)), append(ways, optCredsFile)
	}
	if path := opts[optNkeyFile]; path != "" {
		opt, err := nkeyOption(inv, path)
		if err != nil {
			return fail("%v", err)
		}
		a.opts, ways = append(a.opts, opt), append(ways, optNkeyFile)
	}
	if len(ways) > 1 {
		return fail("give one way to authenticate, not %s", strings.Join(ways, " and "))
	}
	if hasTLSOption(opts) {
		for _, u := range us {
			if strings.EqualFold(u.Scheme, "ws") {
				return fail("TLS options go with nats://, tls:// or wss://, not ws://")
			}
		}
		cfg, err := destinationTLS(opts)
		if err != nil {
			return fail("%v", err)
		}
		a.opts = append(a.opts, nats.Secure(cfg))
	}
	var servers []string
	for _, u := range us {
		c := *u
		c.User, c.RawQuery, c.ForceQuery = nil, "", false
		servers = append(servers, c.String())
	}
	a.urls = strings.Join(servers, ",")
	return a, nil
}

// readOptionFile reads the file a URL option names, refusing it with its
// path when it cannot be read.
func readOptionFile(opt, path string) ([]byte, error) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s=%s: cannot read it: %v", opt, clean(path), pathReason(err))
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%s=%s is not a file", opt, clean(path))
	case st.Size() > maxEnvFile:
		return nil, fmt.Errorf("%s=%s holds %d bytes: not a credentials file", opt, clean(path), st.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: cannot read it: %v", opt, clean(path), pathReason(err))
	}
	return b, nil
}

// checkCredsFile checks that a credentials file holds a user JWT and an
// nkey seed, and registers the seed with the redactor. The client reads
// the file again at each connection, so that a renewed file is taken.
func checkCredsFile(inv *invocation, path string) error {
	b, err := readOptionFile(optCredsFile, path)
	if err != nil {
		return err
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return fmt.Errorf("%s=%s: no nkey seed in the file (a .creds file, as nsc writes it)", optCredsFile, clean(path))
	}
	defer kp.Wipe()
	if token, err := nkeys.ParseDecoratedJWT(b); err != nil {
		return fmt.Errorf("%s=%s: no user JWT in the file (a .creds file, as nsc writes it)", optCredsFile, clean(path))
	} else if _, err := jwt.DecodeUserClaims(token); err != nil {
		return fmt.Errorf("%s=%s: the file's JWT is not a user's (a .creds file, as nsc writes it)", optCredsFile, clean(path))
	}
	if seed, err := kp.Seed(); err == nil {
		inv.stderr.add(string(seed))
	}
	return nil
}

// nkeyOption checks an nkey seed file and returns the client's option,
// which signs the server's challenge with it.
func nkeyOption(inv *invocation, path string) (nats.Option, error) {
	b, err := readOptionFile(optNkeyFile, path)
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: no nkey seed in the file (a user seed, SU...)", optNkeyFile, clean(path))
	}
	if seed, err := kp.Seed(); err == nil {
		inv.stderr.add(string(seed))
	}
	kp.Wipe()
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: not an nkey user seed (SU...)", optNkeyFile, clean(path))
	}
	return opt, nil
}

// natsCredentialErrors are the server's answers that refuse the
// connection's credentials.
var natsCredentialErrors = []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired}

// openNATS connects a NATS destination's publisher.
func openNATS(inv *invocation, log *slog.Logger, owner string, ep endpoint, natsCfg *heraldnats.Config,
	unreachable func(error) error) (herald.Publisher, func(), error) {
	auth, err := natsDestination(inv, ep.label(inv), ep)
	if err != nil {
		return nil, nil, err
	}
	nc, closeNATS, err := connectNATS(inv, log, owner, auth.urls, auth.opts...)
	if err != nil {
		refused := slices.ContainsFunc(natsCredentialErrors, func(e error) bool { return errors.Is(err, e) })
		if err := destinationRefused(inv, ep, err, refused); err != nil {
			return nil, nil, err
		}
		switch {
		case errors.Is(err, nats.ErrSecureConnRequired):
			return nil, nil, fmt.Errorf("destination %s at %s requires TLS: use tls:// or give ca_file=", ep.name, ep.display)
		case errors.Is(err, nats.ErrSecureConnWanted):
			return nil, nil, fmt.Errorf("destination %s at %s does not offer TLS, which its URL asks for", ep.name, ep.display)
		}
		return nil, nil, unreachable(err)
	}
	cfg := *natsCfg
	cfg.Logger, cfg.CloudEvents = log, ep.ce
	pub, err := heraldnats.New(nc, &cfg)
	if err != nil {
		closeNATS()
		return nil, nil, errors.New(natsHints.Replace(inv.stderr.scrub(err.Error())))
	}
	return pub, closeNATS, nil
}
