package main

import (
	"strings"

	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// webhookPreviousSecretEnv is the retiring secret of a rollover of
// HERALD_WEBHOOK_SECRET: requests are signed under both meanwhile.
const webhookPreviousSecretEnv = "HERALD_WEBHOOK_PREVIOUS_SECRET"

// webhookSigning is a webhook destination's signing secrets from the
// environment, as the publisher's configuration takes them, and how its
// errors are worded for the command line.
type webhookSigning struct {
	own   heraldwebhook.Endpoint // the destination's own secrets, if set
	def   string                 // HERALD_WEBHOOK_SECRET
	prev  string                 // HERALD_WEBHOOK_PREVIOUS_SECRET
	hints *strings.Replacer
}

// webhookSecrets reads the signing secrets of a webhook destination:
// HERALD_DESTINATION_<NAME>_SECRET and _PREVIOUS_SECRET for a
// --destination that has its own, else (and for --publisher)
// HERALD_WEBHOOK_SECRET and HERALD_WEBHOOK_PREVIOUS_SECRET. Each may be
// read from a file through its _FILE twin; each is registered with the
// redactor. A PREVIOUS_SECRET goes with the SECRET beside it.
func webhookSecrets(inv *invocation, ep endpoint) (webhookSigning, error) {
	var s webhookSigning
	var err error
	if s.def, err = inv.env(webhookSecretEnv); err != nil {
		return s, err
	}
	if s.prev, err = inv.env(webhookPreviousSecretEnv); err != nil {
		return s, err
	}
	inv.stderr.add(s.def, s.prev)
	replace := []string{
		// The publisher's wording for a missing secret.
		"heraldwebhook: Config.Default.Secret is required, or set Config.Secret",
		webhookSecretEnv + " is required: the whsec_... secret every webhook request is signed with",
	}
	if !ep.publisher {
		ep.kind = "webhook"
		ownName, own, err := inv.destinationSecret(ep, "SECRET")
		if err != nil {
			return s, err
		}
		prevName, prev, err := inv.destinationSecret(ep, "PREVIOUS_SECRET")
		if err != nil {
			return s, err
		}
		s.own = heraldwebhook.Endpoint{Secret: own, PreviousSecret: prev}
		replace = []string{
			replace[0], webhookSecretEnv + " (or " + ownName + ") is required: the whsec_... secret every webhook request is signed with",
			"Config.Default.PreviousSecret", prevName,
			"Config.Default.Secret", ownName,
		}
	}
	s.hints = strings.NewReplacer(append(replace,
		"heraldwebhook: Config.Default.URL: ", "",
		" (Config.Default)", "",
		"heraldwebhook: ", "",
		"Config.PreviousSecret", webhookPreviousSecretEnv,
		"Config.Secret", webhookSecretEnv,
	)...)
	return s, nil
}
