package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func init() {
	register(command{name: "version", summary: "print the kmirror version", run: func(context.Context, []string) error {
		fmt.Fprintln(os.Stdout, versionString())
		return nil
	}})
	register(command{name: "help", summary: "list the commands", run: func(context.Context, []string) error {
		printHelp(os.Stdout)
		return nil
	}})
}

func versionString() string {
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("kmirror %s (commit %s, %s, %s/%s)", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
