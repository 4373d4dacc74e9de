package main

import (
	"errors"
	"os"
	"strings"
)

// maxEnvFile bounds a value read from a file: a DSN, a URL or a secret.
const maxEnvFile = 64 << 10

// lookupEnv reads the environment variable name, or, when it is unset or
// empty, the file its twin name_FILE names (a mounted Kubernetes or Docker
// secret), without the file's final line break. Giving both is refused: one
// of them would be ignored. Errors name the variables and the path, never
// the value, and never put a colon after a variable's name: the redactor
// takes the word after "..._SECRET_FILE:" or "..._PASSWORD_FILE:" for a
// secret and would hide it.
func lookupEnv(getenv func(string) (string, bool), name string) (string, bool, error) {
	v, ok := getenv(name)
	path, fromFile := getenv(name + "_FILE")
	fromFile = fromFile && path != ""
	switch {
	case ok && v != "" && fromFile:
		return "", false, usagef("%s and %s_FILE are both set: give one", name, name)
	case ok && v != "":
		return v, true, nil
	case !fromFile:
		return v, ok, nil
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return "", false, usagef("%s_FILE names %s, which cannot be read: %v", name, clean(path), pathReason(err))
	case !st.Mode().IsRegular():
		return "", false, usagef("%s_FILE names %s, which is not a file", name, clean(path))
	case st.Size() > maxEnvFile:
		return "", false, usagef("%s_FILE names %s, which holds %d bytes; a value from a file is at most %d", name, clean(path), st.Size(), maxEnvFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false, usagef("%s_FILE names %s, which cannot be read: %v", name, clean(path), pathReason(err))
	}
	v = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", false, usagef("%s_FILE names %s, which is empty", name, clean(path))
	}
	return v, true, nil
}

// pathReason is the reason of a file error without the path, which the
// caller already says.
func pathReason(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// env reads a variable of the daemon's own (a secret, a setting without
// a flag), or its _FILE twin; see lookupEnv.
func (inv *invocation) env(name string) (string, error) {
	v, _, err := lookupEnv(inv.getenv, name)
	return v, err
}
