package heraldnats_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldnats"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// Parse reads back, field for field, any event a Writer accepts from the
// message Publish builds for it, with or without a subject prefix.
func FuzzParseRoundTrip(f *testing.F) {
	publishertest.AddFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, id []byte, topic, key, typ, aggregateType, aggregateID string, payload []byte,
		header1, value1, header2, value2, prefix string) {
		env, ok := publishertest.FuzzEvent(id, topic, key, typ, aggregateType, aggregateID, payload, header1, value1, header2, value2)
		if !ok {
			return
		}
		var (
			got herald.Message
			err error
		)
		if prefix == "" {
			got, err = heraldnats.Parse(heraldnats.Message(env.Topic, &env))
		} else {
			got, err = heraldnats.ParseWithPrefix(heraldnats.Message(prefix+"."+env.Topic, &env), prefix)
		}
		require.NoError(t, err)
		require.Equal(t, env.Message, got)
	})
}

// Whatever a message holds, Parse takes it only with a UUID in Herald-Id,
// and never hands Herald's or NATS's own headers back as the producer's.
// The header block is read as a consumer reads it off the wire.
func FuzzParseAnyMessage(f *testing.F) {
	id := "0190d5a3-7c1e-7b4a-9f00-0123456789ab"
	f.Add("orders.placed", "NATS/1.0\r\nHerald-Id: "+id+"\r\nHerald-Key: k\r\nX-Tenant: acme\r\n\r\n", []byte("{}"), "")
	f.Add("prod.orders", "NATS/1.0\r\nHerald-Id: "+id+"\r\nNats-Msg-Id: "+id+"\r\nherald-key: lower\r\n\r\n", []byte{}, "prod")
	f.Add("orders", "NATS/1.0\r\nHerald-Id: not-a-uuid\r\n\r\n", []byte("x"), "")
	f.Add("orders", "NATS/1.0 503\r\n\r\n", []byte(nil), "")
	f.Add("orders", "NATS/1.0\r\nHerald-Id: "+id+"\r\nHerald-Id: "+uuid.Nil.String()+"\r\nX-A: 1\r\nX-A: 2\r\n\r\n", []byte("x"), "")
	f.Add("", "garbage", []byte("x"), "")
	f.Fuzz(func(t *testing.T, subject, block string, data []byte, prefix string) {
		h, err := nats.DecodeHeadersMsg([]byte(block))
		if err != nil {
			h = nil
		}
		got, err := heraldnats.ParseWithPrefix(&nats.Msg{Subject: subject, Header: h, Data: data}, prefix)
		if err != nil {
			return
		}
		_, err = uuid.Parse(got.ID)
		require.NoError(t, err, "took %q as an event id", got.ID)
		require.Equal(t, h.Get(herald.HeaderID), got.ID)
		require.Equal(t, data, got.Payload)
		if prefix == "" {
			require.Equal(t, subject, got.Topic)
		} else {
			require.Equal(t, subject, prefix+"."+got.Topic)
		}
		for name, v := range got.Headers {
			lower := strings.ToLower(name)
			require.False(t, strings.HasPrefix(lower, "herald-") || strings.HasPrefix(lower, "nats-"), "header %q handed back", name)
			require.Equal(t, h[name][0], v)
		}
	})
}

// A NATS URL's password or token never shows in the error ParseURLs
// refuses it with, nor in the client's server URLs, which carry no user
// information nor Herald's options. (What heraldspec.Parse checks before,
// the scheme, the host, the list, is its own fuzz's business.)
func FuzzParseURLs(f *testing.F) {
	const core = "Zq7Secret"
	f.Add("relay", "pw", "127.0.0.1:4222", "", false)
	f.Add("", "", "127.0.0.1:4222", ",nats://127.0.0.1:4223", true)
	f.Add("u", "a,b", "h:1", "?ca_file=/nonexistent", false)
	f.Add("u", "%zz", "[::1]:4222", "?creds_file=x&nkey_file=y", false)
	f.Add("u", "x/", "h", "/p?q#f", false)
	f.Add("", "#", "h", "", true)
	f.Add("u", "", "h", ",tls://v@h2", true)
	f.Fuzz(func(t *testing.T, user, around, host, rest string, token bool) {
		if strings.Contains(user+host+rest, core) {
			return
		}
		secret := around + core + around
		info := user + ":" + secret
		if token {
			info = secret
		}
		var urls []*url.URL
		for _, one := range strings.Split("nats://"+info+"@"+host+rest, ",") {
			u, err := heraldspec.ParseURL(strings.TrimSpace(one))
			if err != nil {
				return
			}
			if s, ok := heraldspec.Lookup(u.Scheme); !ok || s.Kind != "nats" || u.Hostname() == "" {
				return // refused by heraldspec.Parse
			}
			urls = append(urls, u)
		}
		c, err := heraldnats.ParseURLs(&heraldspec.Destination{Name: "orders"}, urls)
		if err != nil {
			require.NotContains(t, err.Error(), core)
			return
		}
		for _, s := range c.Options.Servers {
			require.NotContains(t, s, core)
			require.NotContains(t, s, "?")
			require.NotContains(t, s, "@")
		}
	})
}
