// Package golangci registers heraldvet as a golangci-lint module plugin
// named "heraldvet". Build a golangci-lint that includes it with
// `golangci-lint custom` and a .custom-gcl.yml such as:
//
//	version: v2.15.0
//	plugins:
//	  - module: github.com/herald-outbox/herald
//	    import: github.com/herald-outbox/herald/heraldvet/golangci
//	    version: v0.1.0 # the Herald version your service uses
//
// then enable it in .golangci.yml:
//
//	linters:
//	  enable:
//	    - heraldvet
//	  settings:
//	    custom:
//	      heraldvet:
//	        type: module
//	        description: dual writes and misused WriteTx calls
//	        settings:
//	          http: false # optional: leave net/http POSTs out
package golangci

import (
	"fmt"

	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"

	"github.com/herald-outbox/herald/heraldvet"
)

func init() {
	register.Plugin("heraldvet", New)
}

// Settings are the plugin's settings in .golangci.yml.
type Settings struct {
	// HTTP reports net/http POSTs as publishes. Defaults to true.
	HTTP *bool `json:"http"`
}

// New returns the plugin configured by the settings golangci-lint read from
// .golangci.yml; an unknown setting is an error.
func New(settings any) (register.LinterPlugin, error) {
	s, err := register.DecodeSettings[Settings](settings)
	if err != nil {
		return nil, fmt.Errorf("heraldvet: %w", err)
	}
	cfg := &heraldvet.Config{IgnoreHTTP: s.HTTP != nil && !*s.HTTP}
	return plugin{cfg: cfg}, nil
}

type plugin struct{ cfg *heraldvet.Config }

func (p plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) {
	return []*analysis.Analyzer{heraldvet.NewAnalyzer(p.cfg)}, nil
}

// GetLoadMode asks for type information: calls are matched by the package
// and type of what they call.
func (plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
