package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/herald-outbox/herald/heraldspec"
)

// herald config check, show and reference: the configuration file's
// commands. check and show take every flag of the relay, so that what
// they check and show is what `herald relay` with the same file, variables
// and flags would run with.

func setupConfigCheck(f *flagSet) func(context.Context, *invocation) error {
	relay := setupRelay(f)
	return func(ctx context.Context, inv *invocation) error {
		if inv.flags.config == nil {
			return usagef("--config (or HERALD_CONFIG) is required: the file to check")
		}
		inv.checkOnly = true
		if err := relay(ctx, inv); err != nil {
			return err
		}
		_, err := fmt.Fprintf(inv.stdout, "%s: valid for herald relay (nothing was connected to)\n", clean(inv.flags.config.path))
		return err
	}
}

func setupConfigShow(f *flagSet) func(context.Context, *invocation) error {
	setupRelay(f)
	return func(_ context.Context, inv *invocation) error {
		if err := noArgs(inv); err != nil {
			return err
		}
		out, err := effectiveConfig(inv)
		if err != nil {
			return err
		}
		_, err = inv.stdout.Write(out)
		return err
	}
}

func setupConfigReference(*flagSet) func(context.Context, *invocation) error {
	return func(_ context.Context, inv *invocation) error {
		if err := noArgs(inv); err != nil {
			return err
		}
		_, err := io.WriteString(inv.stdout, configReference())
		return err
	}
}

// shownSetting is one line of config show.
type shownSetting struct {
	key, value, source string
}

// effectiveConfig is the configuration the relay would run with, as
// YAML in the file's shape, each value followed by where it came from;
// every secret masked.
func effectiveConfig(inv *invocation) ([]byte, error) {
	f := inv.flags
	var shown []shownSetting
	source := func(name string) string {
		if s, ok := f.source[name]; ok {
			return s
		}
		return "default"
	}
	for _, s := range configSettings {
		if s.flag == "" {
			v, err := inv.env(s.env)
			if err != nil {
				return nil, err
			}
			if v == "" {
				continue
			}
			src := envSource(inv, s.env)
			if s.secret {
				v = heraldspec.Redacted
			}
			shown = append(shown, shownSetting{s.key, v, src})
			continue
		}
		fl := f.fs.Lookup(s.flag)
		if fl == nil {
			continue
		}
		v := fl.Value.String()
		if v == "" && !f.isSet(s.flag) {
			continue
		}
		if s.flag == "publisher" {
			v = maskURLs(v)
		}
		shown = append(shown, shownSetting{s.key, v, source(s.flag)})
	}
	if db := f.fs.Lookup("db"); db != nil && db.Value.String() != "" {
		shown = append(shown, shownSetting{configDatabase, maskDSN(db.Value.String()), source("db")})
	}
	if names := f.fs.Lookup("databases"); names != nil && names.Value.String() != "" {
		for _, name := range strings.Split(names.Value.String(), ",") {
			name = strings.TrimSpace(name)
			env := databaseEnv(name)
			dsn, _, err := lookupEnv(inv.getenv, env)
			if err != nil {
				return nil, err
			}
			shown = append(shown, shownSetting{configDatabases + "." + name, maskDSN(dsn), envSource(inv, env)})
		}
	}
	if dests := f.fs.Lookup("destination"); dests != nil {
		for _, d := range strings.Fields(dests.Value.String()) {
			name, raw, _ := strings.Cut(d, "=")
			key := configDestinations + "." + name
			shown = append(shown, shownSetting{key + ".url", maskURLs(raw), source("destination")})
			for _, what := range destinationSecretKeys {
				env := envWord("HERALD_DESTINATION_" + name + "_" + what)
				if v, err := inv.env(env); err == nil && v != "" {
					shown = append(shown, shownSetting{key + "." + what, heraldspec.Redacted, envSource(inv, env)})
				}
			}
		}
	}
	for _, list := range []struct {
		flag     string
		debezium bool
	}{{"route", false}, {"debezium-route", true}} {
		fl := f.fs.Lookup(list.flag)
		if fl == nil {
			continue
		}
		for i, r := range strings.Fields(fl.Value.String()) {
			topic, dest, _ := strings.Cut(r, "=")
			v := "topic " + topic + " to " + dest
			if list.debezium {
				v += " (debezium)"
			}
			shown = append(shown, shownSetting{fmt.Sprintf("%s.%s[%d]", configRoutes, list.flag, i), v, source(list.flag)})
		}
	}
	return renderShown(inv, shown)
}

// envSource names where a variable's value came from: the file's key, or
// the variable.
func envSource(inv *invocation, env string) string {
	if c := inv.flags.config; c != nil {
		if label, ok := c.origin(inv.flags.process, env); ok {
			return label
		}
		if label, ok := c.origin(inv.flags.process, env+"_FILE"); ok {
			return label
		}
	}
	return env
}

// renderShown prints the settings as YAML, nested by their keys' dots,
// each value with its source as a comment.
func renderShown(inv *invocation, shown []shownSetting) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	child := func(parent *yaml.Node, key string) *yaml.Node {
		for i := 0; i+1 < len(parent.Content); i += 2 {
			if parent.Content[i].Value == key {
				return parent.Content[i+1]
			}
		}
		n := &yaml.Node{Kind: yaml.MappingNode}
		parent.Content = append(parent.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, n)
		return n
	}
	for _, s := range shown {
		parts := strings.Split(s.key, ".")
		parent := root
		for _, p := range parts[:len(parts)-1] {
			parent = child(parent, p)
		}
		parent.Content = append(parent.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: parts[len(parts)-1]},
			&yaml.Node{Kind: yaml.ScalarNode, Value: inv.stderr.scrub(s.value), LineComment: s.source})
	}
	var b strings.Builder
	b.WriteString("# The configuration herald relay would run with: flags over HERALD_* variables over the file.\n")
	b.WriteString("# Secrets are masked. Each value's comment says where it came from.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// maskDSN is a DSN without its password.
func maskDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil && strings.Contains(dsn, "://") {
		return heraldspec.Redact(u, false)
	}
	for _, secret := range heraldspec.DSNSecrets(dsn) {
		dsn = strings.ReplaceAll(dsn, secret, heraldspec.Redacted)
	}
	return dsn
}

// maskURLs is a destination's URL list with every password or token
// masked, and a webhook's path and query (often its credential) left out.
func maskURLs(raw string) string {
	var out []string
	for _, one := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		switch {
		case err != nil:
			out = append(out, "(not a URL)")
		case u.Scheme == "http" || u.Scheme == "https":
			out = append(out, u.Scheme+"://"+u.Host)
		default:
			out = append(out, heraldspec.Redact(u, true))
		}
	}
	return strings.Join(out, ",")
}

// configReference is the reference of every key of the file, in
// Markdown: docs/config.md holds it between its markers, and
// TestConfigReferenceIsCurrent fails when it drifts.
func configReference() string {
	relay := newFlagSet("relay")
	setupRelay(relay)
	status := newFlagSet("status")
	setupStatus(status)
	var b strings.Builder
	b.WriteString("| key | variable | flag | default | what it sets |\n|---|---|---|---|---|\n")
	row := func(key, variable, flagName, def, text string) {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s |\n", key, variable, flagName, def, strings.ReplaceAll(text, "|", "\\|"))
	}
	usageOf := func(name string) (string, string) {
		for _, f := range []*flagSet{relay, status} {
			if fl := f.fs.Lookup(name); fl != nil {
				_, text := flag.UnquoteUsage(fl)
				text = strings.TrimSuffix(text, " (required)")
				def := fl.DefValue
				if def == "" || def == "false" || def == "0" && name != "max-per-key" {
					def = ""
				}
				return text, def
			}
		}
		return "", ""
	}
	text, _ := usageOf("db")
	row(configDatabase, "HERALD_DB", "`--db`", "", text+"; ${VARIABLE} or {dsn_file: PATH} when it holds a password")
	row(configDatabases+".NAME", "HERALD_DB_NAME", "`--databases`", "",
		"a database of several, by name: its DSN, or {dsn: ..., dsn_file: PATH}; every log line and metric carries the name")
	row(configDestinations+".NAME", "HERALD_DESTINATION", "`--destination`", "",
		"a destination: its URL, or {url: ..., password, token, secret, previous_secret} (each secret as ${VARIABLE} or NAME_file: PATH)")
	row(configRoutes, "HERALD_ROUTE, HERALD_DEBEZIUM_ROUTE", "`--route`, `--debezium-route`", "",
		"a list of {topic: PATTERN, destination: NAME, debezium: true|false}, in order")
	for _, s := range configSettings {
		if s.flag == "" {
			key := s.key
			if s.secret {
				key += "`, `" + s.key + "_file"
			}
			row(key, s.env, "", "", s.doc)
			continue
		}
		text, def := usageOf(s.flag)
		row(s.key, s.variable(), "`--"+s.flag+"`", backquote(def), text)
	}
	return b.String()
}

func backquote(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

// configFlagsWithoutKeys are the configuration flags the file spells
// otherwise: the file itself, and the keys that are not one scalar.
var configFlagsWithoutKeys = []string{"config", "db", "databases", "destination", "route", "debezium-route"}

// hasConfigKey reports whether a configuration flag has a key.
func hasConfigKey(name string) bool {
	return slices.Contains(configFlagsWithoutKeys, name) ||
		slices.ContainsFunc(configSettings, func(s configSetting) bool { return s.flag == name })
}
