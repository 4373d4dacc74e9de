package golangci_test

import (
	"path/filepath"
	"testing"

	"github.com/golangci/plugin-module-register/register"
	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/analysis/analysistest"

	_ "github.com/herald-outbox/herald/heraldvet/golangci"
	"github.com/herald-outbox/herald/internal/testenv"
)

// testdata is heraldvet's: the same cases, run through the plugin. It
// must be absolute: analysistest makes it a GOPATH.
func testdata(t *testing.T) string {
	dir, err := filepath.Abs(filepath.Join("..", "testdata"))
	require.NoError(t, err)
	return dir
}

// newPlugin builds the plugin the way golangci-lint does: by its
// registered name, from the settings decoded from .golangci.yml.
func newPlugin(t *testing.T, settings any) register.LinterPlugin {
	t.Helper()
	newFn, err := register.GetPlugin("heraldvet")
	require.NoError(t, err)
	p, err := newFn(settings)
	require.NoError(t, err)
	require.Equal(t, register.LoadModeTypesInfo, p.GetLoadMode())
	return p
}

func TestPluginReportsWithoutSettings(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	analyzers, err := newPlugin(t, nil).BuildAnalyzers()
	require.NoError(t, err)
	require.Len(t, analyzers, 1)
	analysistest.Run(t, testdata(t), analyzers[0], "dualwrite", "txmismatch", "ignored", "httpposts")
}

func TestPluginSettingHTTPFalse(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	analyzers, err := newPlugin(t, map[string]any{"http": false}).BuildAnalyzers()
	require.NoError(t, err)
	analysistest.Run(t, testdata(t), analyzers[0], "httpignored")
}

func TestPluginRefusesUnknownSettings(t *testing.T) {
	t.Parallel()
	newFn, err := register.GetPlugin("heraldvet")
	require.NoError(t, err)
	_, err = newFn(map[string]any{"htp": false})
	require.ErrorContains(t, err, `unknown field "htp"`)
}
