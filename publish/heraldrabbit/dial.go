package heraldrabbit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
)

// DefaultDialTimeout bounds a Dialer's TCP connect and AMQP handshake
// together, unless the URI sets connection_timeout or amqp.Config.Dial is
// set.
const DefaultDialTimeout = 10 * time.Second

// DefaultConnectionName is the connection_name client property a Dialer
// sets when amqp.Config.Properties does not: the management UI and
// rabbitmqctl list_connections show it.
const DefaultConnectionName = "herald"

// Dialer returns a DialFunc that connects to uri (amqp://user:password@host:5672/vhost,
// or amqps:// for TLS) with cfg, the common case of New. cfg is the
// amqp091 client's own: TLSClientConfig, SASL, Heartbeat, FrameSize and
// Properties take effect as amqp.DialConfig documents them. On top of it:
//
//   - without cfg.Dial, the TCP connect ends when the DialFunc's ctx does,
//     and the connect and the handshake together take at most the URI's
//     connection_timeout, or DefaultDialTimeout;
//   - the connection_name property defaults to DefaultConnectionName;
//   - cfg.Recovery must be nil: the Publisher reconnects by itself.
//
// It checks uri at once. Neither its errors nor those of the DialFunc
// contain uri's password.
func Dialer(uri string, cfg amqp.Config) (DialFunc, error) {
	return ClusterDialer([]string{uri}, cfg)
}

// ClusterDialer is Dialer for the nodes of one RabbitMQ cluster, one URI
// each: a dial tries them in turn until one connects, starting with the
// node after the one it last connected to, so that a Publisher whose node
// went away (a restart, a lost machine) connects to another. Each node's
// connect and handshake take at most its URI's connection_timeout, or
// DefaultDialTimeout; the DialFunc fails when every node failed, with
// each node's error. With cfg.TLSClientConfig and no ServerName in it,
// each node's certificate is verified for its own host.
func ClusterDialer(uris []string, cfg amqp.Config) (DialFunc, error) {
	if len(uris) == 0 {
		return nil, errors.New("heraldrabbit: no AMQP URI")
	}
	if cfg.Recovery != nil {
		return nil, errors.New("heraldrabbit: amqp.Config.Recovery must be nil: the Publisher reconnects by itself")
	}
	nodes := make([]node, len(uris))
	for i, uri := range uris {
		parsed, err := amqp.ParseURI(uri)
		if err != nil {
			// The parser's error can quote the URI, password included.
			return nil, fmt.Errorf("heraldrabbit: not an AMQP URI: %s", herald.Scrub(err.Error()))
		}
		nodes[i] = node{uri: uri, where: redact(parsed), timeout: DefaultDialTimeout}
		if parsed.ConnectionTimeout > 0 {
			nodes[i].timeout = time.Duration(parsed.ConnectionTimeout) * time.Millisecond
		}
	}
	// A copy: the caller's table stays as it was, and every dial sends the
	// same properties.
	props := maps.Clone(cfg.Properties)
	if props == nil {
		props = amqp.NewConnectionProperties()
	}
	if _, ok := props["connection_name"]; !ok {
		props.SetClientConnectionName(DefaultConnectionName)
	}
	cfg.Properties = props
	// DialConfig fills in ServerName on the tls.Config it is given (the
	// host it dials, unless set): each dial writes to a copy of the
	// caller's.
	tlsConfig := cfg.TLSClientConfig.Clone()
	userDial := cfg.Dial
	var (
		mu   sync.Mutex
		next int // the node the next dial tries first
	)
	return func(ctx context.Context) (*amqp.Connection, error) {
		mu.Lock()
		first := next
		mu.Unlock()
		var errs []error
		for k := range nodes {
			i := (first + k) % len(nodes)
			n := nodes[i]
			if err := ctx.Err(); err != nil {
				errs = append(errs, fmt.Errorf("dialing %s: %w", n.where, err))
				break
			}
			c := cfg
			c.TLSClientConfig = tlsConfig.Clone()
			if userDial == nil {
				c.Dial = contextDial(ctx, n.timeout)
			}
			conn, err := amqp.DialConfig(n.uri, c)
			if err == nil {
				mu.Lock()
				next = (i + 1) % len(nodes)
				mu.Unlock()
				return conn, nil
			}
			errs = append(errs, &scrubbedError{prefix: "dialing " + n.where, err: err})
		}
		if len(errs) == 1 {
			return nil, errs[0]
		}
		return nil, dialErrors(errs)
	}, nil
}

// dialErrors are the errors of a dial that tried several nodes, said on
// one line; errors.As and errors.Is look into each.
type dialErrors []error

func (e dialErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e dialErrors) Unwrap() []error { return e }

// node is one URI of a ClusterDialer.
type node struct {
	uri, where string // where: the URI without its password
	timeout    time.Duration
}

// scrubbedError is an error whose text goes through herald.Scrub (the
// client's errors may quote the URI, password included) and which still
// unwraps to the client's error, so that a caller can tell refused
// credentials (*amqp.Error, ACCESS_REFUSED) or an untrusted certificate
// from a broker that is down.
type scrubbedError struct {
	prefix string
	err    error
}

func (e *scrubbedError) Error() string { return e.prefix + ": " + herald.Scrub(e.err.Error()) }
func (e *scrubbedError) Unwrap() error { return e.err }

// contextDial is amqp.DefaultDial whose connect also ends with ctx:
// DialConfig takes no context, and a Publisher that closes must not wait
// for a connect to a host that does not answer.
func contextDial(ctx context.Context, timeout time.Duration) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// No heartbeat runs before the handshake completes: the deadline
		// keeps a silent server from stalling it. The client clears it once
		// the connection is open.
		if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// redact returns uri as a URL without its password.
func redact(uri amqp.URI) string {
	vhost := ""
	if uri.Vhost != "/" {
		vhost = url.PathEscape(uri.Vhost)
	}
	user := ""
	if uri.Username != "" {
		user = url.User(uri.Username).String() + "@"
	}
	return fmt.Sprintf("%s://%s%s/%s", uri.Scheme, user, net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)), vhost)
}
