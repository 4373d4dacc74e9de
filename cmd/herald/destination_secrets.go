package main

import (
	"strings"

	"github.com/herald-outbox/herald/heraldspec"
)

// A destination's secrets stay out of its URL, which shows in the process
// list: each comes from a variable of its own, or from the file that
// variable's _FILE twin names (inv.env). One scheme for every broker:
//
//	--publisher URL           HERALD_<KIND>_<SECRET>               HERALD_KAFKA_PASSWORD, HERALD_NATS_TOKEN
//	--destination NAME=URL    HERALD_DESTINATION_<NAME>_<SECRET>   HERALD_DESTINATION_EVENTS_PASSWORD
//
// KIND is the publisher the URL's scheme picks (kafka, nats, redis, amqp,
// ...), NAME the destination's name; both upper-cased, '-' written '_'.
// SECRET says what it holds: PASSWORD, TOKEN.

// secretEnv names the variable of one of ep's secrets.
func (ep endpoint) secretEnv(secret string) string {
	if ep.publisher {
		return envWord("HERALD_" + ep.kind + "_" + secret)
	}
	return envWord("HERALD_DESTINATION_" + ep.name + "_" + secret)
}

func envWord(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// destinationSecret reads one of ep's secrets (secretEnv, or its _FILE
// twin) and registers it with the redactor; "" when neither is set.
func destinationSecret(inv *invocation, ep endpoint, secret string) (string, error) {
	v, err := inv.env(ep.secretEnv(secret))
	if err != nil {
		return "", err
	}
	inv.stderr.add(v)
	return v, nil
}

// urlUserIsSecret reports whether the user name of a destination URL is
// a secret: a NATS token (nats://TOKEN@host) unless the destination's
// PASSWORD variable makes it a user name; never for Kafka, whose user
// information is always a user name; for the others, as before.
func urlUserIsSecret(inv *invocation, ep endpoint, raw string) bool {
	scheme, _, _ := strings.Cut(raw, "://")
	switch ep.kind = schemes[strings.ToLower(scheme)]; ep.kind {
	case "kafka":
		return false
	case "nats":
		password, err := inv.env(ep.secretEnv("PASSWORD"))
		return err != nil || password == ""
	}
	return true
}

// destinationSecretWhats are the secrets a destination may take from the
// environment, for checkSecretNames.
var destinationSecretWhats = heraldspec.SecretNames

// checkSecretNames refuses destinations whose names spell the same
// variables ("orders-eu" and "orders_eu", or "hook" and "hook_previous",
// whose HERALD_DESTINATION_HOOK_PREVIOUS_SECRET would be both the second's
// secret and the first's previous one): one would take the other's secret.
func checkSecretNames(inv *invocation, endpoints []endpoint) error {
	owner := map[string]string{}
	for _, ep := range endpoints {
		if ep.publisher {
			continue
		}
		for _, what := range destinationSecretWhats {
			v := endpoint{name: ep.name}.secretEnv(what)
			for _, name := range []string{v, v + "_FILE"} {
				if other, ok := owner[name]; ok && other != ep.name {
					return usagef("%s: destinations %s and %s would share the variable %s; rename one",
						inv.flags.label("destination"), other, ep.name, name)
				}
				owner[name] = ep.name
			}
		}
	}
	return nil
}
