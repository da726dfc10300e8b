package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "\nprints the version: the module version the binary was built as, else devel,\n"+
		"with the VCS revision it was built from when known")
	if pos, err := parseArgs(fs, args, stdout, stderr); err != nil {
		return helpIsSuccess(err)
	} else if len(pos) != 0 {
		return usageErr("version takes no arguments")
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, "relay", versionOf(info))
	return nil
}

// versionOf describes a build: the main module's version ("devel" when
// there is none, as under go run or go test), then the VCS revision, its
// time and whether the tree was modified, and the Go version, when known.
func versionOf(info *debug.BuildInfo) string {
	if info == nil {
		return "devel"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var details []string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			details = append([]string{"revision " + s.Value}, details...)
		case "vcs.time":
			details = append(details, s.Value)
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified {
		details = append(details, "modified")
	}
	if info.GoVersion != "" {
		details = append(details, info.GoVersion)
	}
	if len(details) > 0 {
		v += " (" + strings.Join(details, ", ") + ")"
	}
	return v
}
