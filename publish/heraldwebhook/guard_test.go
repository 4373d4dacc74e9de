package heraldwebhook_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

func TestRefusedRanges(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1":            "loopback",
		"127.255.0.9":          "loopback",
		"::1":                  "loopback",
		"::ffff:127.0.0.1":     "loopback",
		"10.1.2.3":             "private",
		"172.16.0.1":           "private",
		"172.31.255.255":       "private",
		"192.168.1.1":          "private",
		"169.254.169.254":      "link-local", // cloud metadata endpoints
		"fe80::1":              "link-local",
		"fc00::1":              "unique-local",
		"fd12:3456::1":         "unique-local",
		"0.0.0.0":              "unspecified",
		"::":                   "unspecified",
		"224.0.0.1":            "multicast",
		"239.255.255.250":      "multicast",
		"ff02::1":              "multicast",
		"0.1.2.3":              "this-network",
		"100.64.0.1":           "shared (carrier-grade NAT)",
		"198.18.0.1":           "benchmarking",
		"255.255.255.255":      "reserved or broadcast",
		"64:ff9b::7f00:1":      "loopback (NAT64)",
		"2002:a00:1::1":        "private (6to4)",
		"8.8.8.8":              "",
		"172.32.0.1":           "",
		"93.184.216.34":        "",
		"2001:4860::8888":      "",
		"64:ff9b::808:808":     "",
		"2002:808:808::1":      "",
		"::ffff:93.184.216.34": "",
	} {
		require.Equalf(t, want, heraldwebhook.RefusedReason(netip.MustParseAddr(addr)), "address %s", addr)
	}
}
