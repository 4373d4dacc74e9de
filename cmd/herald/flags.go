package main

import (
	"errors"
	"flag"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// flagSet is one command's flags. Configuration flags take their default
// from a HERALD_* environment variable (--batch-size from HERALD_BATCH_SIZE);
// a flag given on the command line wins. Selectors and output switches
// (--all, --topic, --json, --limit) have no variable on purpose: HERALD_ALL
// left in an environment must never widen a discard.
type flagSet struct {
	fs     *flag.FlagSet
	envOf  map[string]string // flag name -> environment variable, for configuration flags
	source map[string]string // flag name -> where its value came from: "--name" or the variable
	// bad is the error of the last value that failed to parse, worded for
	// the user; flag's own wording names neither the variable nor the rule.
	bad error
	// getenv is the environment the command runs with once parse read
	// --config: the process's, with the file's settings beneath it.
	getenv func(string) (string, bool)
	// config is the file --config named; nil without one.
	config *configFile
	// process is the process's own environment, without the file.
	process func(string) (string, bool)
}

func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet("herald "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{fs: fs, envOf: map[string]string{}, source: map[string]string{}}
}

// envName is the environment variable of a configuration flag.
func envName(flagName string) string {
	return "HERALD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// label names where a flag's value came from, for error messages.
func (f *flagSet) label(name string) string {
	if s, ok := f.source[name]; ok {
		return s
	}
	return "--" + name
}

// isSet reports whether a flag was given, on the command line or by its
// variable.
func (f *flagSet) isSet(name string) bool {
	_, ok := f.source[name]
	return ok
}

// funcValue is a flag.Value that keeps its parse error, worded for the
// user, on the flag set.
type funcValue struct {
	f   *flagSet
	set func(string) error
	str func() string
}

func (v funcValue) Set(s string) error {
	err := v.set(s)
	if err != nil {
		v.f.bad = err
	}
	return err
}

func (v funcValue) String() string {
	if v.str == nil { // the zero value flag.isZeroValue builds
		return ""
	}
	return v.str()
}

func (f *flagSet) add(name, usage string, env bool, set func(string) error, str func() string) {
	f.fs.Var(funcValue{f: f, set: set, str: str}, name, usage)
	if env {
		f.envOf[name] = envName(name)
	}
}

// String registers a configuration string flag.
func (f *flagSet) String(name, def, usage string) *string {
	p := new(string)
	*p = def
	f.add(name, usage, true, func(s string) error { *p = s; return nil }, func() string { return *p })
	return p
}

// Bool registers a configuration boolean flag: --name alone turns it on;
// --name=false and its variable take true or false.
func (f *flagSet) Bool(name, usage string) *bool {
	p := new(bool)
	f.fs.Var(boolValue{funcValue{f: f, set: func(s string) error {
		v, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return errors.New("not true or false")
		}
		*p = v
		return nil
	}, str: func() string { return strconv.FormatBool(*p) }}}, name, usage)
	f.envOf[name] = envName(name)
	return p
}

// boolValue is a funcValue the flag package sets with no argument.
type boolValue struct{ funcValue }

func (boolValue) IsBoolFlag() bool { return true }

// Int registers a configuration integer flag.
func (f *flagSet) Int(name string, def int, usage string) *int {
	return f.int(name, def, usage, true)
}

func (f *flagSet) int(name string, def int, usage string, env bool) *int {
	p := new(int)
	*p = def
	f.add(name, usage, env, func(s string) error {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return errors.New("not an integer")
		}
		*p = n
		return nil
	}, func() string { return strconv.Itoa(*p) })
	return p
}

// List registers a repeatable configuration flag: each use adds values,
// and its environment variable holds them separated by spaces.
func (f *flagSet) List(name, usage string) *[]string {
	p := new([]string)
	f.add(name, usage, true, func(s string) error {
		*p = append(*p, strings.Fields(s)...)
		return nil
	}, func() string { return strings.Join(*p, " ") })
	return p
}

// Duration registers a configuration duration flag.
func (f *flagSet) Duration(name string, def time.Duration, usage string) *time.Duration {
	return f.duration(name, def, usage, true)
}

// LocalDuration registers a duration flag without an environment variable.
func (f *flagSet) LocalDuration(name string, def time.Duration, usage string) *time.Duration {
	return f.duration(name, def, usage, false)
}

func (f *flagSet) duration(name string, def time.Duration, usage string, env bool) *time.Duration {
	p := new(time.Duration)
	*p = def
	f.add(name, usage, env, func(s string) error {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return errors.New("not a duration (give a unit: 500ms, 30s, 5m, 2h)")
		}
		*p = d
		return nil
	}, func() string { return fmtDuration(*p) })
	return p
}

// Retention registers --retention: a duration, 0 for the default, and
// "forever" or a negative duration to keep published rows forever.
func (f *flagSet) Retention(name, usage string) *time.Duration {
	p := new(time.Duration)
	f.add(name, usage, true, func(s string) error {
		s = strings.TrimSpace(s)
		if strings.EqualFold(s, "forever") {
			*p = -1
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New(`not a duration (such as 72h) or "forever"`)
		}
		if d < 0 {
			d = -1
		}
		*p = d
		return nil
	}, func() string {
		switch {
		case *p < 0:
			return "forever"
		case *p == 0:
			return "24h"
		}
		return fmtDuration(*p)
	})
	return p
}

// LocalString, LocalInt and LocalBool register flags without an
// environment variable: selectors and output switches.
func (f *flagSet) LocalString(name, def, usage string) *string {
	return f.fs.String(name, def, usage)
}

func (f *flagSet) LocalInt(name string, def int, usage string) *int {
	return f.int(name, def, usage, false)
}

func (f *flagSet) LocalBool(name string, usage string) *bool {
	return f.fs.Bool(name, false, usage)
}

// parse parses args, flags and positional arguments in any order, then
// fills each configuration flag not given on the command line from its
// environment variable, or from the file its _FILE twin names
// (HERALD_DB_FILE), so that a DSN's password need not be in the process
// list or the environment. It returns the positional arguments.
func (f *flagSet) parse(args []string, getenv func(string) (string, bool)) ([]string, error) {
	var positional []string
	for {
		f.bad = nil
		if err := f.fs.Parse(args); err != nil {
			return nil, f.parseError(err)
		}
		args = f.fs.Args()
		if len(args) == 0 {
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	f.fs.Visit(func(fl *flag.Flag) { f.source[fl.Name] = "--" + fl.Name })
	process := getenv
	f.process = process
	if err := f.readConfig(process); err != nil {
		return nil, err
	}
	if f.config != nil {
		getenv = f.config.getenv(process)
	}
	f.getenv = getenv
	// In name order, so that the first bad variable reported is always the same.
	for _, name := range slices.Sorted(maps.Keys(f.envOf)) {
		env := f.envOf[name]
		if _, onCommandLine := f.source[name]; onCommandLine {
			continue
		}
		v, ok, err := lookupEnv(getenv, env)
		if err != nil {
			return nil, err
		}
		if !ok || v == "" {
			continue
		}
		f.source[name] = env
		if f.config != nil {
			if label, fromFile := f.config.origin(process, env); fromFile {
				f.source[name] = label
			}
		}
		f.bad = nil
		if err := f.fs.Set(name, v); err != nil {
			if name == "db" || name == "publisher" {
				// Never repeat a value that may hold a password.
				return nil, usagef("%s: invalid value: %v", f.source[name], err)
			}
			return nil, usagef("%s: invalid value %q: %v", f.source[name], v, err)
		}
	}
	return positional, nil
}

// readConfig reads the file --config (or HERALD_CONFIG) names, for a
// command that takes one.
func (f *flagSet) readConfig(getenv func(string) (string, bool)) error {
	fl := f.fs.Lookup("config")
	if fl == nil {
		return nil
	}
	path := fl.Value.String()
	if _, given := f.source["config"]; !given {
		v, ok, err := lookupEnv(getenv, envName("config"))
		if err != nil {
			return err
		}
		if !ok || v == "" {
			return nil
		}
		path = v
		f.source["config"] = envName("config")
		if err := fl.Value.Set(v); err != nil {
			return err
		}
	}
	if path == "" {
		return nil
	}
	c, err := loadConfig(path, getenv)
	if err != nil {
		return err
	}
	f.config = c
	return nil
}

// parseError rewords the flag package's errors as one line naming the flag.
func (f *flagSet) parseError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "flag provided but not defined: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag provided but not defined: "), "-")
		return usagef("unknown flag --%s (%ssee %s -h)", name, didYouMeanFlag(name, f.fs), f.fs.Name())
	case strings.HasPrefix(msg, "flag needs an argument: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag needs an argument: "), "-")
		return usagef("--%s needs a value", name)
	case strings.HasPrefix(msg, "invalid boolean value "):
		// invalid boolean value "x" for -name: reason
		_, name, _ := strings.Cut(msg, " for -")
		name, _, _ = strings.Cut(name, ":")
		return usagef("--%s takes no value (or true/false)", name)
	case strings.HasPrefix(msg, "invalid value "):
		// invalid value "x" for flag -name: reason
		val, rest, _ := strings.Cut(strings.TrimPrefix(msg, "invalid value "), " for flag -")
		name, _, _ := strings.Cut(rest, ":")
		if name == "db" || name == "publisher" {
			return usagef("--%s: invalid value", name) // it may hold a password
		}
		reason := "invalid value"
		if f.bad != nil {
			reason = f.bad.Error()
		}
		return usagef("--%s: invalid value %s: %s", name, val, reason)
	}
	return usagef("%s", msg)
}

// fmtDuration prints a duration without trailing zero units: 5m, not 5m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
