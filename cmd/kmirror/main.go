// Command kmirror is Kafka Cluster Mirroring for unmodified Apache Kafka: a
// Kafka-wire-compatible proxy in front of the destination brokers that serves
// the mirror RPCs and runs the replication pipeline. Each capability is a
// subcommand registered by its own file in this package.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one `kmirror NAME` subcommand. run gets the arguments after NAME
// and a context cancelled on SIGINT/SIGTERM; it returns errUsage to print
// help for the command.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("kmirror: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errUsage asks main to print the command's usage and exit 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	stopProfile := startCPUProfile()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printHelp(stderr)
		return 2
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kmirror: unknown command %q\n\n", args[0])
		printHelp(stderr)
		return 2
	}
	err := c.run(ctx, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "kmirror %s: %s\nRun 'kmirror %s -h' for its flags.\n", c.name, c.summary, c.name)
		return 2
	default:
		fmt.Fprintf(stderr, "kmirror %s: %v\n", c.name, err)
		return 1
	}
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "kmirror: Kafka Cluster Mirroring for unmodified Apache Kafka\n\nUsage: kmirror COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'kmirror COMMAND -h' for a command's flags.")
}
