package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// flagUsage writes head, then every flag of fs as --NAME TYPE, its
// description and default: what `kmirror proxy -h` prints, in the same
// double-dash style as `kmirror mirrors --help` (Go's default usage writes
// -name, which reads as if the flags were single-dash only).
func flagUsage(w io.Writer, fs *flag.FlagSet, head string) {
	fmt.Fprint(w, head)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if typ != "" {
			name += " " + strings.ToUpper(typ)
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			usage += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, usage)
	})
	tw.Flush()
}

// proxyHelp heads `kmirror proxy -h`.
const proxyHelp = `Usage: kmirror proxy --upstream HOST:PORT[,HOST:PORT] [flags]

Serve the Kafka protocol in front of the destination brokers and run the
mirrors (their control plane and copy pipeline) until SIGINT or SIGTERM.
Clients and kmirror mirrors connect to --listen; each destination broker gets a
listener of its own (--broker-ports). docs/proxy.md describes every flag and the
--config YAML file that sets the same (flags win over the file).

Example:
  kmirror proxy --upstream broker1:9092,broker2:9092 --listen 0.0.0.0:9092 \
      --advertised-host kmirror.example.com --broker-ports 9100 \
      --metrics-addr 0.0.0.0:9464 --secrets-key-file /etc/kmirror/secrets.keys

Flags:
`
