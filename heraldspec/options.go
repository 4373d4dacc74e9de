package heraldspec

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// Options merges the query options of a destination's URLs, refusing an
// option not in accepted, one given twice or without a value, and one
// that two URLs give different values: options may be written on any URL
// of a list, or on each alike. scheme names the URLs in errors
// ("kafka://").
func Options(scheme string, urls []*url.URL, accepted []string) (map[string]string, error) {
	opts := map[string]string{}
	for _, u := range urls {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return nil, errors.New("the query is not name=value pairs")
		}
		for _, name := range slices.Sorted(maps.Keys(q)) {
			vs := q[name]
			prev, seen := opts[name]
			switch {
			case !slices.Contains(accepted, name):
				return nil, fmt.Errorf("option %q is not known: a %s URL takes %s", Clean(name), scheme, strings.Join(accepted, ", "))
			case len(vs) > 1:
				return nil, fmt.Errorf("option %s is given twice", name)
			case vs[0] == "":
				return nil, fmt.Errorf("option %s has no value", name)
			case seen && prev != vs[0]:
				return nil, fmt.Errorf("option %s differs between the URLs of one destination", name)
			}
			opts[name] = vs[0]
		}
	}
	return opts, nil
}

// User is the user information of a destination's URLs, which a list
// writes on one URL or on each alike; nil when none has any.
func User(urls []*url.URL) (*url.Userinfo, error) {
	var user *url.Userinfo
	for _, u := range urls {
		switch {
		case u.User == nil:
		case user == nil:
			user = u.User
		case user.String() != u.User.String():
			return nil, errors.New("the URLs of one destination give different user information: give it once")
		}
	}
	return user, nil
}

// ClientOptions are the query options of a URL whose client library
// parses the URL itself (redis://, amqp://): Herald's own, which Herald
// reads and takes out, and the client's, passed on.
type ClientOptions struct {
	Shown, TLSShown string   // "a redis(s)://", "rediss://": for errors
	Herald          []string // Herald's; its last three are the TLS files
	Client          []string // the client's, passed on
	// Refused are options refused with their reason.
	Refused map[string]string
}

// Check refuses an option that is neither Herald's nor the client's, one
// given twice, and one refused with its reason.
func (o ClientOptions) Check(q url.Values) error {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case o.Refused[name] != "":
			return errors.New(o.Refused[name])
		case !slices.Contains(o.Herald, name) && !slices.Contains(o.Client, name):
			return fmt.Errorf("option %q is not known: %s URL takes %s (the last three for %s only), and the client's %s",
				Clean(name), o.Shown, strings.Join(o.Herald, ", "), o.TLSShown, strings.Join(o.Client, ", "))
		case len(q[name]) > 1:
			return fmt.Errorf("option %s is given twice", name)
		}
	}
	return nil
}

// ForClient is u without Herald's options, for the client to parse.
func (o ClientOptions) ForClient(u *url.URL) string {
	q := u.Query()
	for _, name := range o.Herald {
		q.Del(name)
	}
	client := *u
	client.RawQuery = q.Encode()
	return client.String()
}
