#!/usr/bin/env bash
# Installs what `make test` needs beyond Go: Java 17+ and Maven (real Apache Kafka
# brokers and Kafka's own tools, resolved from Maven Central), kcat (librdkafka
# client tests), HAProxy, Prometheus (promtool) and Chromium (operability tests). Debian packages via apt-get when run as root; otherwise it says what
# to install. KMIRROR_SKIP_REAL_KAFKA=1 lets local work go on without Java (never in CI).
set -euo pipefail

have_java17() {
  command -v java >/dev/null 2>&1 &&
    java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])'
}

pkgs=()
have_java17 || pkgs+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
command -v kcat >/dev/null 2>&1 || pkgs+=(kcat)
# Real infrastructure of the operability tests (docs/deploy.md, docs/observability.md).
command -v haproxy >/dev/null 2>&1 || pkgs+=(haproxy)
command -v promtool >/dev/null 2>&1 || pkgs+=(prometheus)
command -v chromium >/dev/null 2>&1 || pkgs+=(chromium)

if ((${#pkgs[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test-deps: installing ${pkgs[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  else
    echo "test-deps: make test needs these Debian packages: ${pkgs[*]} (apt-get install ${pkgs[*]})" >&2
    if [ "${KMIRROR_SKIP_REAL_KAFKA:-}" = 1 ] && [ "${CI:-}" != true ]; then
      echo "test-deps: KMIRROR_SKIP_REAL_KAFKA=1: tests that need them will be skipped" >&2
      exit 0
    fi
    exit 1
  fi
fi

# Resolve the Kafka jars once, up front, so parallel test packages find them cached.
echo "test-deps: resolving the Kafka jars (first run: ~100 MB from Maven Central, progress every 10 s)" >&2
go run ./internal/kafkatest/kafkactl jars >/dev/null
