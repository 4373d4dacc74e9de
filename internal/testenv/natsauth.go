package testenv

import (
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// NATSUser makes an nkey user and returns its public key and seed.
func NATSUser(t testing.TB) (pub string, seed []byte) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	must(t, err)
	pub, err = kp.PublicKey()
	must(t, err)
	seed, err = kp.Seed()
	must(t, err)
	return pub, seed
}

// NATSOperator is a NATS operator with one JetStream account, which the
// servers of ServerOptions trust, and which issues credentials files.
type NATSOperator struct {
	// Account is the account's key, which signs its users.
	Account nkeys.KeyPair

	operator              *jwt.OperatorClaims
	accountPub, systemPub string
	accountJWT, systemJWT string
}

// NewNATSOperator makes an operator, its JetStream account and the system
// account JetStream needs in operator mode.
func NewNATSOperator(t testing.TB) *NATSOperator {
	t.Helper()
	okp, err := nkeys.CreateOperator()
	must(t, err)
	opub, err := okp.PublicKey()
	must(t, err)
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(okp)
	must(t, err)
	oc, err := jwt.DecodeOperatorClaims(ojwt)
	must(t, err)
	account := func(jetStream bool) (nkeys.KeyPair, string, string) {
		kp, err := nkeys.CreateAccount()
		must(t, err)
		pub, err := kp.PublicKey()
		must(t, err)
		ac := jwt.NewAccountClaims(pub)
		if jetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		claims, err := ac.Encode(okp)
		must(t, err)
		return kp, pub, claims
	}
	o := &NATSOperator{operator: oc}
	o.Account, o.accountPub, o.accountJWT = account(true)
	_, o.systemPub, o.systemJWT = account(false)
	return o
}

// ServerOptions are a server's options that trust the operator: set them
// on the options of a server the test starts.
func (o *NATSOperator) ServerOptions(t testing.TB) *server.Options {
	t.Helper()
	resolver := &server.MemAccResolver{}
	must(t, resolver.Store(o.accountPub, o.accountJWT))
	must(t, resolver.Store(o.systemPub, o.systemJWT))
	return &server.Options{TrustedOperators: []*jwt.OperatorClaims{o.operator}, AccountResolver: resolver, SystemAccount: o.systemPub}
}

// NATSCreds are a new user's credentials file and its seed.
type NATSCreds struct {
	File []byte // a .creds file's content, as nsc writes it
	Seed string
}

// Creds issues a user of the account, signed by signer (Account, or a key
// the servers do not trust).
func (o *NATSOperator) Creds(t testing.TB, signer nkeys.KeyPair) NATSCreds {
	t.Helper()
	pub, seed := NATSUser(t)
	uc := jwt.NewUserClaims(pub)
	uc.IssuerAccount = o.accountPub
	token, err := uc.Encode(signer)
	must(t, err)
	file, err := jwt.FormatUserConfig(token, seed)
	must(t, err)
	return NATSCreds{File: file, Seed: string(seed)}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
