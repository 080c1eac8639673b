#!/usr/bin/env bash
# Real Apache Kafka for the shell: start/stop named KRaft clusters on loopback and
# run Kafka's Java tools. Jars come from Maven Central (cached). See `scripts/kafka.sh`
# without arguments for usage. Implemented in Go (internal/kafkatest) so that tests
# and the shell share one harness.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./internal/kafkatest/kafkactl "$@"
