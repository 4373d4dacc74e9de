package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want Info
	}{
		{"NoBuildInfo", nil, Info{Version: "unknown", GoVersion: "go1.26.0"}},
		{"TaggedInstall", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Path: modulePath, Version: "v0.3.0"}},
			Info{Version: "v0.3.0", GoVersion: "go1.26.8"}},
		{"TheCommandsModuleTagged", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Path: modulePath + "/cmd", Version: "v0.3.0"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: ".."}}}},
			Info{Version: "v0.3.0", GoVersion: "go1.26.8"}},
		{"Checkout", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main:     debug.Module{Path: modulePath, Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			Info{Version: "(devel)", Revision: "abc123-modified", GoVersion: "go1.26.8"}},
		{"Dependency", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Path: "example.com/shop"},
			Deps: []*debug.Module{{Path: "example.com/other", Version: "v1.0.0"}, {Path: modulePath, Version: "v0.4.1"}}},
			Info{Version: "v0.4.1", GoVersion: "go1.26.8"}},
		{"ReplacedDependency", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Path: "example.com/shop"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.4.1", Replace: &debug.Module{Path: "../herald"}}}},
			Info{Version: "v0.4.1 => ../herald", GoVersion: "go1.26.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromBuildInfo(tc.bi, tc.bi != nil)
			if tc.bi == nil {
				got.GoVersion = "go1.26.0" // the test binary's own version otherwise
			}
			require.Equal(t, tc.want, got)
		})
	}
	line := Info{Version: "v0.3.0", Revision: "abc", GoVersion: "go1.26.8"}.String()
	require.True(t, strings.HasPrefix(line, "herald v0.3.0 (abc), go1.26.8 "), line)
}
