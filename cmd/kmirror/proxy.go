package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// `kmirror proxy` runs one kmirror instance in front of the destination
// brokers until SIGINT/SIGTERM: the Kafka-compatible proxy and, unless
// --mirroring=false, the mirror control plane and copy pipeline. Proxy flags
// override the --config file (docs/proxy.md); the mirroring flags are below.
func init() {
	register(command{
		name:    "proxy",
		summary: "serve the Kafka protocol in front of the destination brokers and run the mirrors (--upstream HOST:PORT)",
		run: func(ctx context.Context, args []string) error {
			var (
				mirroring, readOnlyTopic *bool
				brokerACLs               *bool
				statePartitions, rf      *int
				group                    *string
				session                  *time.Duration
				logLevel, secretsKeyFile *string
			)
			cfg, err := proxy.ParseArgsWith("kmirror proxy", args, func(fs *flag.FlagSet) {
				fs.Usage = func() { flagUsage(os.Stdout, fs, proxyHelp) }
				mirroring = fs.Bool("mirroring", true, "run the mirror control plane and copy pipeline (false: proxy only)")
				statePartitions = fs.Int("state-partitions", 50, "partitions of __mirror_state when this instance creates it")
				rf = fs.Int("state-replication-factor", 3, "replication of __mirror_state (clamped to the broker count)")
				group = fs.String("group", "kmirror-coordinators", "consumer group the instances share the mirrors through")
				session = fs.Duration("session-timeout", 10*time.Second, "how soon a dead instance's mirror partitions move to the others")
				readOnlyTopic = fs.Bool("read-only-topic-error", false, "refuse writes to mirror topics with READ_ONLY_TOPIC (134) instead of POLICY_VIOLATION (44)")
				brokerACLs = fs.Bool("broker-acls", false, "make the destination brokers refuse direct writes to mirror topics too: DENY ACLs for User:* while "+
					"a topic is mirrored (needs an authoriser and upstream_sasl credentials of a super user; docs/SECURITY.md)")
				logLevel = fs.String("log-level", "info", "debug, info, warn or error")
				secretsKeyFile = fs.String("secrets-key-file", "", "keys (lines ID=BASE64, the first encrypts) that encrypt mirrors' source secrets in __mirror_state; overrides secrets_key_file of --config")
			})
			if err != nil {
				return err
			}
			if *secretsKeyFile != "" {
				cfg.SecretsKeyFile = *secretsKeyFile
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			code := protocol.ErrPolicyViolation.Code
			if *readOnlyTopic {
				code = protocol.ErrReadOnlyTopic.Code
			}
			in, err := instance.New(ctx, instance.Config{Proxy: cfg, Mirroring: *mirroring, StatePartitions: int32(*statePartitions),
				StateReplicationFactor: int16(*rf), GroupID: *group, SessionTimeout: *session, ReadOnlyErrorCode: code, BrokerACLs: *brokerACLs, Logger: log})
			if err != nil {
				return err
			}
			if err := in.Start(ctx); err != nil {
				return fmt.Errorf("proxy: %w", err)
			}
			log.Info("kmirror serving", "listen", in.Proxy.Addr(), "upstream", cfg.Upstream, "mirroring", *mirroring)
			if err := in.Run(ctx); err != nil {
				return fmt.Errorf("kmirror: %w", err)
			}
			return nil
		},
	})
}
