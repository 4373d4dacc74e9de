package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/herald-outbox/herald/heraldspec"
)

// The daemon's configuration file (--config herald.yaml, HERALD_CONFIG):
// databases, destinations, routes and every setting that has a HERALD_*
// variable, in one place. The file is read into the variables it stands
// for, beneath the process's own: a flag wins over a variable, and a
// variable over the file. A setting the process's environment gives (the
// variable or its _FILE twin) hides the file's, so the two never combine
// into "both set".
//
// Why go.yaml.in/yaml/v3: it is the YAML organisation's maintained line of
// the package most Go programs read YAML with (gopkg.in/yaml.v3), already
// in Herald's module graph, and its yaml.Node keeps each key's line, which
// every error about the file names.
//
// Secrets are given by reference only: a key that holds one (a password,
// a token, a signing secret) takes ${VARIABLE} or its _file twin, and a
// DSN or URL written in the file must not carry a password. A file is
// often committed; a secret in it would be too.

// configSetting is one key of the file: a scalar that stands for a
// variable. flag is the flag the variable belongs to ("" for a variable
// without a flag); env is the variable when flag is "".
type configSetting struct {
	key    string // "relay.batch_size"
	flag   string
	env    string
	secret bool   // given by reference only; masked by config show
	doc    string // for a variable without a flag
}

// variable is the variable a setting stands for.
func (s configSetting) variable() string {
	if s.flag != "" {
		return envName(s.flag)
	}
	return s.env
}

// configSettings are the file's scalar keys, in the reference's order.
// TestConfigKeysCoverEveryVariable fails when a command grows a
// configuration flag that has no key here.
var configSettings = []configSetting{
	{key: "log.format", flag: "log-format"},
	{key: "log.level", flag: "log-level"},
	{key: "outbox.schema", flag: "schema"},
	{key: "outbox.table", flag: "table"},
	{key: "relay.source", flag: "source"},
	{key: "relay.ordering", flag: "ordering"},
	{key: "relay.unordered_topics", flag: "unordered-topics"},
	{key: "relay.skip_dead_topics", flag: "skip-dead-topics"},
	{key: "relay.batch_size", flag: "batch-size"},
	{key: "relay.max_in_flight", flag: "max-in-flight"},
	{key: "relay.max_in_flight_bytes", flag: "max-in-flight-bytes"},
	{key: "relay.max_per_key", flag: "max-per-key"},
	{key: "relay.claim_concurrency", flag: "claim-concurrency"},
	{key: "relay.lease", flag: "lease"},
	{key: "relay.claim_rows", flag: "claim-rows"},
	{key: "relay.fair_by", flag: "fair-by"},
	{key: "relay.delete_on_publish", flag: "delete-on-publish"},
	{key: "relay.poll_interval", flag: "poll-interval"},
	{key: "relay.idle_poll_interval", flag: "idle-poll-interval"},
	{key: "relay.publish_timeout", flag: "publish-timeout"},
	{key: "relay.shutdown_timeout", flag: "shutdown-timeout"},
	{key: "relay.retry_base", flag: "retry-base"},
	{key: "relay.retry_cap", flag: "retry-cap"},
	{key: "relay.max_attempts", flag: "max-attempts"},
	{key: "relay.max_age", flag: "max-age"},
	{key: "relay.retention", flag: "retention"},
	{key: "relay.cleanup_interval", flag: "cleanup-interval"},
	{key: "relay.rescue_interval", flag: "rescue-interval"},
	{key: "default_destination", flag: "default-destination"},
	{key: "publisher", flag: "publisher"},
	{key: "cloudevents.source", flag: "cloudevents-source"},
	{key: "cloudevents.mode", flag: "cloudevents-mode"},
	{key: "nats.create_stream", flag: "nats-create-stream"},
	{key: "nats.stream_subjects", flag: "nats-stream-subjects"},
	{key: "nats.subject_prefix", flag: "nats-subject-prefix"},
	{key: "nats.max_pending", flag: "nats-max-pending"},
	{key: "nats.max_pending_bytes", flag: "nats-max-pending-bytes"},
	{key: "nats.ack_timeout", flag: "nats-ack-timeout"},
	{key: "nats.atomic_batches", flag: "nats-atomic-batches"},
	{key: "cdc.slot", flag: "cdc-slot"},
	{key: "cdc.publication", flag: "cdc-publication"},
	{key: "cdc.create_slot", flag: "cdc-create-slot"},
	{key: "cdc.buffer_bytes", flag: "cdc-buffer-bytes"},
	{key: "cdc.standby_interval", flag: "cdc-standby-interval"},
	{key: "admin.addr", flag: "admin-addr"},
	{key: "admin.token", env: adminTokenEnv, secret: true,
		doc: "the token that lets the admin page and API requeue, discard, pause, stop and start (at least 32 characters)"},
	{key: "admin.relay_url", flag: "relay-admin"},
	{key: "webhook.secret", env: webhookSecretEnv, secret: true,
		doc: "the whsec_... secret webhook requests are signed with, for webhook destinations without their own"},
	{key: "webhook.previous_secret", env: webhookPreviousSecretEnv, secret: true,
		doc: "the retiring signing secret during a rollover: requests are signed with both"},
	{key: "webhook.allow_networks", env: webhookAllowEnv,
		doc: "CIDRs a webhook may reach although private or loopback, comma-separated"},
}

// The file's keys that are not one scalar each.
const (
	configDatabase     = "database"     // one DSN: --db
	configDatabases    = "databases"    // NAME: DSN, or NAME: {dsn, dsn_file}
	configDestinations = "destinations" // NAME: URL, or NAME: {url, password, ...}
	configRoutes       = "routes"       // [{topic, destination, debezium}]
)

// destinationSecretKeys are the secret keys of a destination, each with a
// _file twin.
var destinationSecretKeys = []string{"password", "token", "secret", "previous_secret"}

// configValue is one variable the file sets.
type configValue struct {
	value string
	key   string // the key, for messages: "relay.batch_size"
	line  int
	file  string
}

// label names where the value was written: "relay.batch_size (herald.yaml:12)".
func (v configValue) label() string { return fmt.Sprintf("%s (%s:%d)", v.key, v.file, v.line) }

// configFile is a loaded configuration file: the variables it sets.
type configFile struct {
	path string
	vars map[string]configValue
}

// reference matches ${NAME}, a reference to a variable of the process.
var reference = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// loadConfig reads the file at path. getenv is the process's environment,
// which ${NAME} references read. Errors name the file and the line.
func loadConfig(path string, getenv func(string) (string, bool)) (*configFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--config %s: cannot read it: %v", clean(path), pathReason(err))
	}
	c := &configFile{path: path, vars: map[string]configValue{}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil // an empty file sets nothing
		}
		return nil, usagef("%s: %s", clean(path), strings.TrimPrefix(err.Error(), "yaml: "))
	}
	l := &configLoader{c: c, getenv: getenv}
	if len(doc.Content) == 0 {
		return c, nil
	}
	if err := l.top(doc.Content[0]); err != nil {
		return nil, err
	}
	return c, nil
}

// configLoader walks the file's nodes into c.vars.
type configLoader struct {
	c      *configFile
	getenv func(string) (string, bool)
}

// fail is an error about node n.
func (l *configLoader) fail(n *yaml.Node, format string, args ...any) error {
	return usagef("%s:%d: %s", clean(l.c.path), n.Line, fmt.Sprintf(format, args...))
}

// mapping checks that n is a mapping and returns its keys and values,
// refusing a key given twice.
func (l *configLoader) mapping(n *yaml.Node, what string) ([][2]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, l.fail(n, "%s must be a mapping of keys to values", what)
	}
	var out [][2]*yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			return nil, l.fail(k, "%s is given twice", joinKey(what, k.Value))
		}
		seen[k.Value] = true
		out = append(out, [2]*yaml.Node{k, v})
	}
	return out, nil
}

func joinKey(parent, key string) string {
	if parent == "" || parent == "the file" {
		return key
	}
	return parent + "." + key
}

// scalar is n's text with its ${NAME} references read, refusing a
// mapping or a list, and a reference to a variable that is not set.
func (l *configLoader) scalar(n *yaml.Node, key string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", l.fail(n, "%s takes a single value, not a %s", key, nodeKind(n))
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	var missing string
	v := reference.ReplaceAllStringFunc(n.Value, func(ref string) string {
		name := reference.FindStringSubmatch(ref)[1]
		val, ok := l.getenv(name)
		if !ok && missing == "" {
			missing = name
		}
		return val
	})
	if missing != "" {
		return "", l.fail(n, "%s refers to ${%s}, which is not set", key, missing)
	}
	return v, nil
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}

// isReference reports whether n's text is one ${NAME} and nothing else.
func isReference(n *yaml.Node) bool {
	m := reference.FindStringIndex(n.Value)
	return m != nil && m[0] == 0 && m[1] == len(n.Value)
}

// set records that the file sets variable to value at n.
func (l *configLoader) set(n *yaml.Node, key, variable, value string) {
	l.c.vars[variable] = configValue{value: value, key: key, line: n.Line, file: l.c.path}
}

// top reads the file's top level.
func (l *configLoader) top(n *yaml.Node) error {
	pairs, err := l.mapping(n, "the file")
	if err != nil {
		return err
	}
	sections := map[string]bool{}
	for _, s := range configSettings {
		if p, _, ok := strings.Cut(s.key, "."); ok {
			sections[p] = true
		}
	}
	for _, kv := range pairs {
		k, v := kv[0], kv[1]
		switch {
		case k.Value == configDatabase:
			if err := l.dsn(v, configDatabase, "HERALD_DB"); err != nil {
				return err
			}
		case k.Value == configDatabases:
			if err := l.databases(v); err != nil {
				return err
			}
		case k.Value == configDestinations:
			if err := l.destinations(v); err != nil {
				return err
			}
		case k.Value == configRoutes:
			if err := l.routes(v); err != nil {
				return err
			}
		case sections[k.Value]:
			inner, err := l.mapping(v, k.Value)
			if err != nil {
				return err
			}
			for _, ikv := range inner {
				if err := l.setting(ikv[0], ikv[1], k.Value+"."+ikv[0].Value); err != nil {
					return err
				}
			}
		default:
			if err := l.setting(k, v, k.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

// configKeys are every key the file takes, for suggestions.
func configKeys() []string {
	keys := []string{configDatabase, configDatabases, configDestinations, configRoutes}
	for _, s := range configSettings {
		keys = append(keys, s.key)
		if s.secret {
			keys = append(keys, s.key+"_file")
		}
	}
	return keys
}

// setting reads one scalar key.
func (l *configLoader) setting(k, v *yaml.Node, key string) error {
	base, file := strings.CutSuffix(key, "_file")
	i := slices.IndexFunc(configSettings, func(s configSetting) bool { return s.key == key || (file && s.secret && s.key == base) })
	if i < 0 {
		return l.fail(k, "unknown key %s (%ssee herald config reference)", clean(key), didYouMean(key, configKeys()...))
	}
	s := configSettings[i]
	val, err := l.scalar(v, key)
	if err != nil {
		return err
	}
	switch {
	case file:
		l.set(v, key, s.variable()+"_FILE", val)
		return nil
	case s.secret && !isReference(v) && val != "":
		return l.fail(v, "%s is a secret, given by reference only (${VARIABLE}, or a file named by %s_file), never written in the file", key, key)
	}
	if err := checkSettingValue(s, val); err != nil {
		return l.fail(v, "%s: invalid value %q: %v", key, clean(val), err)
	}
	l.set(v, key, s.variable(), val)
	return nil
}

// checkSettingValue parses val as the setting's flag does, so that a
// wrong type is reported with the file's line.
func checkSettingValue(s configSetting, val string) error {
	if s.flag == "" || val == "" {
		return nil
	}
	// The commands whose flags have keys (not the commands list itself,
	// which holds config check, whose setup leads here).
	for _, setup := range []func(*flagSet) func(context.Context, *invocation) error{setupRelay, setupStatus} {
		f := newFlagSet("config")
		setup(f)
		if fl := f.fs.Lookup(s.flag); fl != nil {
			f.bad = nil
			if err := fl.Value.Set(val); err != nil {
				if f.bad != nil {
					return f.bad
				}
				return err
			}
			return nil
		}
	}
	return nil
}

// dsn reads a database's DSN: a DSN or ${NAME}, or {dsn: ..., dsn_file: ...}.
func (l *configLoader) dsn(v *yaml.Node, key, variable string) error {
	if v.Kind == yaml.MappingNode {
		pairs, err := l.mapping(v, key)
		if err != nil {
			return err
		}
		for _, kv := range pairs {
			switch kv[0].Value {
			case "dsn":
				if err := l.dsn(kv[1], key+".dsn", variable); err != nil {
					return err
				}
			case "dsn_file":
				path, err := l.scalar(kv[1], key+".dsn_file")
				if err != nil {
					return err
				}
				l.set(kv[1], key+".dsn_file", variable+"_FILE", path)
			default:
				return l.fail(kv[0], "unknown key %s: a database takes dsn or dsn_file", joinKey(key, clean(kv[0].Value)))
			}
		}
		return nil
	}
	val, err := l.scalar(v, key)
	if err != nil {
		return err
	}
	if !isReference(v) && dsnHasPassword(val) {
		return l.fail(v, "%s holds a password, which is never written in the file (give the DSN as ${VARIABLE}, or in a file named by dsn_file)", key)
	}
	l.set(v, key, variable, val)
	return nil
}

// dsnHasPassword reports whether a DSN written in the file carries a
// password: a URL's, or libpq's password= keyword.
func dsnHasPassword(dsn string) bool {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return true
		}
	}
	return len(heraldspec.DSNSecrets(dsn)) > 0
}

// databases reads NAME: DSN entries: --databases NAMES with HERALD_DB_<NAME>.
func (l *configLoader) databases(v *yaml.Node) error {
	pairs, err := l.mapping(v, configDatabases)
	if err != nil {
		return err
	}
	var names []string
	for _, kv := range pairs {
		name := kv[0].Value
		if !databaseName.MatchString(name) {
			return l.fail(kv[0], "databases: name %q must match %s", clean(name), databaseName)
		}
		if err := l.dsn(kv[1], configDatabases+"."+name, databaseEnv(name)); err != nil {
			return err
		}
		names = append(names, name)
	}
	if len(names) > 0 {
		l.set(v, configDatabases, "HERALD_DATABASES", strings.Join(names, ","))
	}
	return nil
}

// destinations reads NAME: URL entries, or NAME: {url, password, ...}.
func (l *configLoader) destinations(v *yaml.Node) error {
	pairs, err := l.mapping(v, configDestinations)
	if err != nil {
		return err
	}
	var list []string
	for _, kv := range pairs {
		name, key := kv[0].Value, configDestinations+"."+kv[0].Value
		if !destinationName.MatchString(name) {
			return l.fail(kv[0], "destinations: name %q must match %s", clean(name), destinationName)
		}
		urlNode := kv[1]
		if kv[1].Kind == yaml.MappingNode {
			urlNode = nil
			inner, err := l.mapping(kv[1], key)
			if err != nil {
				return err
			}
			for _, ikv := range inner {
				ik := ikv[0].Value
				what, file := strings.CutSuffix(ik, "_file")
				switch {
				case ik == "url":
					urlNode = ikv[1]
				case slices.Contains(destinationSecretKeys, what):
					val, err := l.scalar(ikv[1], key+"."+ik)
					if err != nil {
						return err
					}
					variable := envWord("HERALD_DESTINATION_" + name + "_" + what)
					if file {
						variable += "_FILE"
					} else if !isReference(ikv[1]) && val != "" {
						return l.fail(ikv[1], "%s.%s is a secret, given by reference only (${VARIABLE}, or a file named by %s_file), never written in the file", key, ik, ik)
					}
					l.set(ikv[1], key+"."+ik, variable, val)
				default:
					return l.fail(ikv[0], "unknown key %s.%s: a destination takes url and the secrets %s (each also as _file)",
						key, clean(ik), strings.Join(destinationSecretKeys, ", "))
				}
			}
			if urlNode == nil {
				return l.fail(kv[0], "%s has no url", key)
			}
		}
		raw, err := l.scalar(urlNode, key)
		if err != nil {
			return err
		}
		if strings.ContainsAny(raw, " \t\n") {
			return l.fail(urlNode, "%s: a URL holds no spaces", key)
		}
		if !isReference(urlNode) {
			for _, one := range strings.Split(raw, ",") {
				if u, err := url.Parse(strings.TrimSpace(one)); err == nil && u.User != nil {
					if _, ok := u.User.Password(); ok {
						return l.fail(urlNode, "%s holds a password, which is never written in the file (give it by reference in %s.password, as ${VARIABLE} or password_file)", key, key)
					}
				}
			}
		}
		list = append(list, name+"="+raw)
	}
	if len(list) > 0 {
		l.set(v, configDestinations, envName("destination"), strings.Join(list, " "))
	}
	return nil
}

// routes reads a list of {topic, destination, debezium}.
func (l *configLoader) routes(v *yaml.Node) error {
	if v.Kind != yaml.SequenceNode {
		return l.fail(v, "routes must be a list of {topic: ..., destination: ...}")
	}
	var plain, debezium []string
	for i, r := range v.Content {
		key := fmt.Sprintf("routes[%d]", i)
		pairs, err := l.mapping(r, key)
		if err != nil {
			return err
		}
		var topic, dest string
		isDebezium := false
		for _, kv := range pairs {
			val, err := l.scalar(kv[1], key+"."+kv[0].Value)
			if err != nil {
				return err
			}
			switch kv[0].Value {
			case "topic":
				topic = val
			case "destination":
				dest = val
			case "debezium":
				if isDebezium, err = strconv.ParseBool(val); err != nil {
					return l.fail(kv[1], "%s.debezium: use true or false", key)
				}
			default:
				return l.fail(kv[0], "unknown key %s.%s: a route takes topic, destination and debezium", key, clean(kv[0].Value))
			}
		}
		switch {
		case topic == "" || dest == "":
			return l.fail(r, "%s needs a topic and a destination", key)
		case strings.ContainsAny(topic+dest, " \t\n="):
			return l.fail(r, "%s: a topic or destination holds no spaces or '='", key)
		}
		if isDebezium {
			debezium = append(debezium, topic+"="+dest)
		} else {
			plain = append(plain, topic+"="+dest)
		}
	}
	if len(plain) > 0 {
		l.set(v, configRoutes, envName("route"), strings.Join(plain, " "))
	}
	if len(debezium) > 0 {
		l.set(v, configRoutes, envName("debezium-route"), strings.Join(debezium, " "))
	}
	return nil
}

// getenv is the process's environment with the file's variables beneath
// it: a setting the process gives, as the variable or its _FILE twin,
// hides the file's.
func (c *configFile) getenv(process func(string) (string, bool)) func(string) (string, bool) {
	return func(name string) (string, bool) {
		base := strings.TrimSuffix(name, "_FILE")
		if v, ok := process(base); ok && v != "" {
			return process(name)
		}
		if v, ok := process(base + "_FILE"); ok && v != "" {
			return process(name)
		}
		if v, ok := c.vars[name]; ok {
			return v.value, true
		}
		return process(name)
	}
}

// origin names the key of the file a variable's value came from, when
// the process does not set it itself.
func (c *configFile) origin(process func(string) (string, bool), variable string) (string, bool) {
	v, ok := c.vars[variable]
	if !ok {
		return "", false
	}
	base := strings.TrimSuffix(variable, "_FILE")
	for _, name := range []string{base, base + "_FILE"} {
		if pv, set := process(name); set && pv != "" {
			return "", false
		}
	}
	return v.label(), true
}
