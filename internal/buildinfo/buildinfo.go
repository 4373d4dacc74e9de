// Package buildinfo says which Herald a binary holds, for `herald version`
// and the herald_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// modulePath is Herald's module, and commandsModule the module of its
// commands (herald, herald-lab), whose version a release tags as
// cmd/vX.Y.Z beside vX.Y.Z.
const (
	modulePath     = "github.com/herald-outbox/herald"
	commandsModule = modulePath + "/cmd"
)

// Info is what the binary knows of the Herald it was built with.
type Info struct {
	// Version is Herald's module version: a tag such as v0.3.0 when built
	// with go install ...@v0.3.0 or required at a version, "(devel)" when
	// built from a checkout, "unknown" without build information.
	Version string
	// Revision is the commit of a checkout build, with "-modified" when
	// the work tree had changes; empty otherwise.
	Revision  string
	GoVersion string
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(bi, ok)
}

func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: "unknown", GoVersion: runtime.Version()}
	if !ok || bi == nil {
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if bi.Main.Path == modulePath || bi.Main.Path == commandsModule {
		info.Version = bi.Main.Version
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && info.Revision != "" {
			info.Revision += "-modified"
		}
		return info
	}
	// Herald as a dependency of the service's own binary.
	for _, m := range bi.Deps {
		if m.Path != modulePath {
			continue
		}
		info.Version = m.Version
		if m.Replace != nil {
			info.Version += " => " + m.Replace.Path
			if m.Replace.Version != "" {
				info.Version += " " + m.Replace.Version
			}
		}
	}
	return info
}

// String is the line `herald version` prints.
func (i Info) String() string {
	s := "herald " + i.Version
	if i.Revision != "" {
		s += " (" + i.Revision + ")"
	}
	return s + ", " + i.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}
