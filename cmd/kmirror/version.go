package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// version, commit and date are set at build time by `make release`:
// -ldflags "-X main.version=v1.2.3 -X main.commit=0123456789ab -X main.date=2026-01-02T03:04:05Z".
// A plain `go build` leaves version "dev", takes the commit from Go's VCS
// stamp and has no date.
var (
	version = "dev"
	commit  = ""
	date    = ""
)

func init() {
	register(command{name: "version", summary: "print the kmirror version, commit and build date", run: func(context.Context, []string) error {
		fmt.Fprintln(os.Stdout, versionString())
		return nil
	}})
	register(command{name: "help", summary: "list the commands", run: func(context.Context, []string) error {
		printHelp(os.Stdout)
		return nil
	}})
}

func versionString() string {
	rev, built := commit, date
	if rev == "" {
		rev = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					rev = s.Value[:12]
				}
			}
		}
	}
	if built == "" {
		built = "unknown"
	}
	return fmt.Sprintf("kmirror %s (commit %s, built %s, %s, %s/%s)", version, rev, built, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
