package heraldmysql

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/herald-outbox/herald/heraldspec"
)

// targetSessionAttrs is the DSN option that picks the servers a
// connection may stay on: any (the default) or read-write.
const targetSessionAttrs = "target_session_attrs"

// cutHostList returns raw, a mysql:// URL, with only the first of its
// comma-separated hosts, which url.Parse can read, and the list when
// there are several (nil otherwise). The hosts end at the path, query or
// fragment, and begin after the last '@' before it: the password's '/',
// '?' and '#' are percent-encoded by then.
func cutHostList(raw string) (string, []string) {
	const scheme = "mysql://"
	rest := strings.TrimPrefix(raw, scheme)
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	start := strings.LastIndex(authority, "@") + 1
	hosts := authority[start:]
	if !strings.Contains(hosts, ",") {
		return raw, nil
	}
	list := strings.Split(hosts, ",")
	return scheme + authority[:start] + list[0] + rest[end:], list
}

// parseHostList checks each host[:port] of a DSN's list and returns them
// as host:port, the port defaulting to 3306.
func parseHostList(list []string) ([]string, error) {
	addrs := make([]string, 0, len(list))
	for i, h := range list {
		if h == "" {
			return nil, fmt.Errorf("mysql:// host %d of %d is empty: name them host1:3306,host2:3306", i+1, len(list))
		}
		u, err := url.Parse("mysql://" + h)
		var addr string
		if err == nil && u.Host == h {
			addr = hostAddr(u.Hostname(), u.Port())
		}
		if addr == "" {
			return nil, fmt.Errorf("mysql:// host %d of %d (%s) is not host or host:port", i+1, len(list), heraldspec.Clean(h))
		}
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// hostAddr returns host:port, the port defaulting to 3306, or "" when
// host is not one that go-sql-driver can read back from it (url.Parse
// takes a host such as "]").
func hostAddr(host, port string) string {
	if port == "" {
		port = "3306"
	}
	addr := net.JoinHostPort(host, port)
	if h, p, err := net.SplitHostPort(addr); err != nil || h != host || p != port || host == "" {
		return ""
	}
	return addr
}

// cutOption returns the raw query without option name, and the option's
// value (its last, if given more than once; "" if not given). The rest of
// the query is kept as written, for go-sql-driver to read as before.
func cutOption(rawQuery, name string) (rest, value string, err error) {
	if rawQuery == "" {
		return "", "", nil
	}
	var kept []string
	for _, pair := range strings.Split(rawQuery, "&") {
		k, v, _ := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); err != nil || key != name {
			kept = append(kept, pair)
			continue
		}
		if value, err = url.QueryUnescape(v); err != nil || value == "" {
			return "", "", errors.New("option " + name + " needs a value: read-write or any")
		}
	}
	return strings.Join(kept, "&"), value, nil
}
