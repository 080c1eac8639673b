package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/kmirror/kmirror/mirrorcli"
)

// `kmirror mirrors` manages mirrors through a kmirror proxy; the logic lives
// in mirrorcli.
func init() {
	register(cliCommand("mirrors", "create, add/remove/pause/resume topics, list, describe and delete mirrors (--bootstrap-server PROXY)",
		mirrorcli.Mirrors))
}

// cliCommand is a command whose logic lives in mirrorcli.
func cliCommand(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) command {
	return command{name: name, summary: summary, run: func(ctx context.Context, args []string) error {
		return cliError(run(ctx, args, os.Stdout, os.Stderr))
	}}
}

// cliError maps mirrorcli's errors onto main's exit statuses: a usage error
// is printed (it names the problem and the fix) and becomes errUsage (exit
// 2); anything else exits 1 with its message.
func cliError(err error) error {
	if err != nil && mirrorcli.IsUsage(err) {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return errUsage
	}
	return err
}
