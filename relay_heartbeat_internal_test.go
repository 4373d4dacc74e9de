package herald

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// The heartbeat's version is Herald's, whether Herald is the binary (the
// daemon) or a dependency of the service that runs the relay; never a
// directory of the build machine.
func TestVersionOfFindsHeraldInTheBuildInformation(t *testing.T) {
	t.Parallel()
	dep := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	for name, c := range map[string]struct {
		bi   debug.BuildInfo
		want string
	}{
		"TheDaemonIsHeraldsMainModule": {debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.4.0"}}, "v0.4.0"},
		"ACheckoutBuildIsDevel":        {debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "(devel)"},
		"AServiceRequiresHerald": {debug.BuildInfo{Main: debug.Module{Path: "example.com/shop", Version: "v1.2.0"},
			Deps: []*debug.Module{dep("github.com/google/uuid", "v1.6.0", nil), dep(modulePath, "v0.3.1", nil)}}, "v0.3.1"},
		"AReplacementByAVersionIsThatVersion": {debug.BuildInfo{Main: debug.Module{Path: "example.com/shop"},
			Deps: []*debug.Module{dep(modulePath, "v0.3.1", dep("example.com/fork/herald", "v0.3.2-fix", nil))}}, "v0.3.2-fix"},
		"AReplacementByADirectoryIsNotNamed": {debug.BuildInfo{Main: debug.Module{Path: "example.com/shop"},
			Deps: []*debug.Module{dep(modulePath, "v0.3.1", dep("/home/ann/herald", "", nil))}}, "v0.3.1 (replaced)"},
		"NoHeraldAtAll": {debug.BuildInfo{Main: debug.Module{Path: "example.com/shop"}}, "unknown"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, versionOf(&c.bi))
		})
	}
}
