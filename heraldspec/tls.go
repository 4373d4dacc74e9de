package heraldspec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// The TLS options of a destination's URL: the CA to trust instead of the
// system's roots, and a client certificate and its key (mutual TLS).
const (
	OptCAFile   = "ca_file"
	OptCertFile = "cert_file"
	OptKeyFile  = "key_file"
)

// TLSOptions are the options TLSConfig reads.
var TLSOptions = []string{OptCAFile, OptCertFile, OptKeyFile}

// HasTLSOption reports whether opts set any TLS file.
func HasTLSOption(opts map[string]string) bool {
	return opts[OptCAFile] != "" || opts[OptCertFile] != "" || opts[OptKeyFile] != ""
}

// TLSConfig is the TLS configuration of a destination's options: the
// system's roots, or the PEM certificates of ca_file; the key pair of
// cert_file and key_file, given together; serverName to verify, or ""
// to leave it to the client, which uses the host it dials. A file that
// cannot be read or holds no certificate is refused with its path, never
// its content.
func TLSConfig(opts map[string]string, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if path := opts[OptCAFile]; path != "" {
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: cannot read it: %v", OptCAFile, Clean(path), PathReason(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s=%s: no PEM certificate in the file", OptCAFile, Clean(path))
		}
		cfg.RootCAs = pool
	}
	cert, key := opts[OptCertFile], opts[OptKeyFile]
	switch {
	case cert == "" && key == "":
		return cfg, nil
	case cert == "" || key == "":
		return nil, fmt.Errorf("%s and %s go together (a client certificate and its key)", OptCertFile, OptKeyFile)
	}
	for _, f := range []struct{ opt, path string }{{OptCertFile, cert}, {OptKeyFile, key}} {
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%s=%s: cannot read it: %v", f.opt, Clean(f.path), PathReason(err))
		}
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		// crypto/tls says what is wrong, not what it read.
		return nil, fmt.Errorf("%s=%s and %s=%s are not a certificate and its key: %s",
			OptCertFile, Clean(cert), OptKeyFile, Clean(key), strings.TrimPrefix(PathReason(err).Error(), "tls: "))
	}
	cfg.Certificates = []tls.Certificate{pair}
	return cfg, nil
}

// TLSCause returns the error in err's chain that says a TLS handshake
// failed for a reason of configuration, or nil: the server's certificate
// is not trusted or not for this host, or the server refused the client's
// certificate (or its absence). Waiting would not help.
func TLSCause(err error) error {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &verify):
		return verify
	case errors.As(err, &unknown):
		return unknown
	case errors.As(err, &hostname):
		return hostname
	case errors.As(err, &invalid):
		return invalid
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert the server sent: a client certificate refused or
		// missing.
		return op
	}
	return nil
}

// TLSHandshakeFailed is the *OpenError of a destination whose TLS
// handshake failed for a reason of configuration; cause is TLSCause's.
func TLSHandshakeFailed(d *Destination, cause error) *OpenError {
	return Refused(d, cause, ": the TLS handshake failed: %s (check the URL's %s, %s and %s)",
		cause.Error(), OptCAFile, OptCertFile, OptKeyFile)
}

// ClassifyRefusal is the *OpenError of a connection error err when it
// says the destination refused its configuration (refused says the
// broker refused the credentials; a TLS verification failure or alert is
// found in err), nil when err may pass: a broker that cannot be reached
// yet.
func ClassifyRefusal(d *Destination, err error, refused bool) *OpenError {
	var reason string
	credentials := false
	var (
		verify *tls.CertificateVerificationError
		ua     x509.UnknownAuthorityError
		host   x509.HostnameError
		inv    x509.CertificateInvalidError
		op     *net.OpError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &ua), errors.As(err, &host), errors.As(err, &inv):
		reason = "the server's certificate is not trusted (give its CA as ca_file=)"
	case errors.As(err, &op) && op.Op == "remote error":
		credentials, reason = true, "the server refused the TLS handshake (check cert_file= and key_file=)"
	}
	msg := err.Error()
	switch {
	case refused || credentials:
		if reason != "" {
			msg = reason + ": " + msg
		}
		return Refused(d, err, " refused the credentials: %s", msg)
	case reason != "":
		return Refused(d, err, ": %s: %s", reason, msg)
	}
	return nil
}
