package main

import (
	"regexp"
	"strings"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// webhookSecrets are a webhook destination's signing secrets as the
// daemon reads them: a --destination's own HERALD_DESTINATION_<NAME>_SECRET
// and _PREVIOUS_SECRET when either is set, else (and for --publisher)
// HERALD_WEBHOOK_SECRET and HERALD_WEBHOOK_PREVIOUS_SECRET. A pair is taken
// whole, never one of each: a PREVIOUS_SECRET goes with the SECRET beside
// it. Each may be read from a file through its _FILE twin; each is
// registered with the redactor.
type webhookSecrets struct{ envSecrets }

// own reports whether the destination has secrets of its own.
func (s webhookSecrets) own() (bool, error) {
	if s.ep.publisher {
		// Its own variables are HERALD_WEBHOOK_*.
		return false, nil
	}
	for _, what := range []string{heraldspec.Secret, heraldspec.PreviousSecret} {
		if v, err := destinationSecret(s.inv, s.ep, what); err != nil || v != "" {
			return v != "", err
		}
	}
	return false, nil
}

// webhookGlobal names the variable every webhook destination without
// secrets of its own reads: HERALD_WEBHOOK_SECRET,
// HERALD_WEBHOOK_PREVIOUS_SECRET.
func webhookGlobal(what string) string { return "HERALD_WEBHOOK_" + what }

func (s webhookSecrets) Secret(what string) (string, error) {
	if own, err := s.own(); own || err != nil {
		return s.envSecrets.Secret(what)
	}
	v, err := s.inv.env(webhookGlobal(what))
	s.inv.stderr.add(v)
	return v, err
}

func (s webhookSecrets) Where(what string) string {
	if own, _ := s.own(); own || s.ep.publisher {
		return s.envSecrets.Where(what)
	}
	if what == heraldspec.Secret {
		// With no secret anywhere, either variable would do.
		secret, _ := s.inv.env(webhookGlobal(heraldspec.Secret))
		previous, _ := s.inv.env(webhookGlobal(heraldspec.PreviousSecret))
		if secret == "" && previous == "" {
			return webhookGlobal(what) + " (or " + s.envSecrets.Where(what) + ")"
		}
	}
	return webhookGlobal(what)
}

// webhookSpec sets what a webhook destination takes from the daemon's
// environment besides its secrets: the networks its address guard allows
// (HERALD_WEBHOOK_ALLOW_NETWORKS), as the publisher's Config, since they
// are the operator's decision, not the URL's (whose query belongs to the
// receiver), and how a refusal says to allow an address.
func webhookSpec(inv *invocation, ep endpoint, d *heraldspec.Destination) error {
	allowed, err := inv.env(webhookAllowEnv)
	if err != nil {
		return err
	}
	d.Secrets = webhookSecrets{envSecrets{inv, ep}}
	d.Config = &heraldwebhook.Config{
		AllowedNetworks: strings.Fields(strings.ReplaceAll(allowed, ",", " ")),
		AllowHint:       webhookAllowEnv + " (CIDRs, comma-separated)",
	}
	return nil
}

// webhookLabel is the label of a webhook destination's errors:
// "destination NAME" for those of its configuration, which the daemon
// has always worded so (they were checked once every destination was
// read), and the flag's for those of its URL, which heraldspec finds
// before the webhook package sees it: one URL, a URL, a host.
func webhookLabel(label string, ep endpoint) string {
	if strings.Contains(ep.raw, ",") {
		return label
	}
	if u, err := heraldspec.ParseURL(ep.raw); err != nil || u.Hostname() == "" {
		return label
	}
	return "destination " + ep.name
}

// webhookNetworkField is the webhook publisher's name for one entry of
// HERALD_WEBHOOK_ALLOW_NETWORKS.
var webhookNetworkField = regexp.MustCompile(`Config\.AllowedNetworks\[\d+\]`)
