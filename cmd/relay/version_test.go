package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersion: relay version (and relay --version) prints one line with
// the version, not the usage, and exits 0.
func TestVersion(t *testing.T) {
	info, _ := debug.ReadBuildInfo()
	want := "relay " + versionOf(info) + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := runLine(t, args...)
			if code != 0 || stdout != want || stderr != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 0, stdout %q, no stderr", code, stdout, stderr, want)
			}
		})
	}
	code, stdout, stderr := runLine(t, "version", "extra")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "version takes no arguments") {
		t.Errorf("relay version extra: exit %d, stdout %q, stderr %q; want a usage error", code, stdout, stderr)
	}
}

func TestVersionOf(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{
		{Key: "-trimpath", Value: "true"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.time", Value: "2025-01-02T03:04:05Z"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.modified", Value: "true"},
	}
	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "devel"},
		{"go run or go test", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{"empty version", &debug.BuildInfo{GoVersion: "go1.26.0"}, "devel (go1.26.0)"},
		{"go install module@version", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.4.2"}}, "v1.4.2 (go1.26.0)"},
		{"built in a checkout", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			"devel (revision 0123456789abcdef0123456789abcdef01234567, 2025-01-02T03:04:05Z, modified, go1.26.0)"},
		{"clean checkout", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20250102030405-0123456789ab"}, Settings: vcs[:4]},
			"v0.0.0-20250102030405-0123456789ab (revision 0123456789abcdef0123456789abcdef01234567, 2025-01-02T03:04:05Z)"},
	}
	for _, tt := range tests {
		if got := versionOf(tt.info); got != tt.want {
			t.Errorf("%s: versionOf = %q, want %q", tt.name, got, tt.want)
		}
	}
}
