package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The herald binary is what teams deploy: it must not link a server that
// only the demo, the benchmarks or the tests embed (they live in
// cmd/herald-lab and the test files).
func TestBinaryLinksNoEmbeddedTestServer(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/herald-outbox/herald/publish/heraldnats", "the list is herald's own dependencies")

	forbidden := map[string]string{
		"github.com/nats-io/nats-server/v2":                "the embedded NATS server (herald-lab demo, herald-lab bench)",
		"github.com/twmb/franz-go/pkg/kfake":               "the in-process Kafka (herald-lab bench)",
		"cloud.google.com/go/pubsub/v2/pstest":             "the in-process Pub/Sub (herald-lab bench)",
		"github.com/herald-outbox/herald/cmd/herald-lab":   "herald-lab's packages",
		"github.com/herald-outbox/herald/internal/testenv": "Herald's test harness",
		"github.com/stretchr/testify":                      "a test library",
		"net/http/httptest":                                "a test server",
		"testing":                                          "the testing package",
	}
	for _, dep := range deps {
		for prefix, what := range forbidden {
			if dep == prefix || strings.HasPrefix(dep, prefix+"/") {
				t.Errorf("herald links %s, %s", dep, what)
			}
		}
	}
}

func TestDemoAndBenchPointToHeraldLab(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"demo"}, {"demo", "--orders", "10"}, {"bench", "drain"}, {"help", "demo"}, {"help", "bench"}} {
		r := cli(t, nil, args...)
		require.Equal(t, exitUsage, r.code, r.String())
		name := args[len(args)-1]
		if args[0] != "help" {
			name = args[0]
		}
		require.Equal(t, "herald: "+name+" is in herald-lab: go run github.com/herald-outbox/herald/cmd/herald-lab@latest "+name+
			" (in a clone: go run ./cmd/herald-lab "+name+")\n", r.stderr)
		require.Empty(t, r.stdout)
	}
	require.Contains(t, usage(), "go run ./cmd/herald-lab demo")
}
