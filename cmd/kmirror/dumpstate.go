package main

import (
	"context"
	"os"

	"github.com/kmirror/kmirror/internal/mirrorcli"
)

// `kmirror dump-state` decodes __mirror_state from the topic or from a log
// segment file; the logic lives in internal/mirrorcli.
func init() {
	register(command{
		name:    "dump-state",
		summary: "decode __mirror_state records (--bootstrap-server HOST:PORT or --segment FILE.log)",
		run: func(ctx context.Context, args []string) error {
			return cliError(mirrorcli.DumpState(ctx, args, os.Stdout, os.Stderr))
		},
	})
}
