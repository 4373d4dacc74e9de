package main

import "os"

// awsGetenv is the environment an sqs:// or sns:// destination's AWS
// configuration reads (heraldaws): the daemon's, with the secret key and
// the session token registered with the redactor as they are read.
func awsGetenv(inv *invocation) func(string) (string, bool) {
	get := inv.getenv
	if get == nil {
		get = os.LookupEnv
	}
	return func(name string) (string, bool) {
		v, ok := get(name)
		if name == "AWS_SECRET_ACCESS_KEY" || name == "AWS_SESSION_TOKEN" {
			inv.stderr.add(v)
		}
		return v, ok
	}
}
