package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/kmirror/kmirror/proxy"
)

// `kmirror proxy` runs the Kafka-compatible proxy in front of the destination brokers until
// SIGINT/SIGTERM, then drains in-flight requests. Flags override the --config file; see
// docs/proxy.md.
func init() {
	register(command{
		name:    "proxy",
		summary: "serve the Kafka protocol in front of the destination brokers (--upstream HOST:PORT)",
		run: func(ctx context.Context, args []string) error {
			cfg, err := proxy.ParseArgs("kmirror proxy", args)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			p, err := proxy.New(cfg, proxy.WithLogger(log))
			if err != nil {
				return err
			}
			if err := p.Run(ctx); err != nil {
				return fmt.Errorf("proxy: %w", err)
			}
			return nil
		},
	})
}
