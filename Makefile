# kmirror — see README.md. Two commands matter on a fresh machine:
#   make run    the demo on embedded clusters
#   make test   everything, real Apache Kafka included
GO        ?= go
FUZZTIME  ?= 60s
TESTFLAGS ?=
BIN       := bin/kmirror
SHELL     := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: all build run run-switch chaos test test-deps test-short lint fuzz bench bench-proxy matrix release soak clean

all: lint test

build:
	$(GO) build -o $(BIN) ./cmd/kmirror

run: build
	./$(BIN) demo

# The cut-over demo (issue 21): an application through a route while the route is switched.
run-switch: build
	./$(BIN) demo --switch

test-deps:
	./scripts/test-deps.sh

# Unit, kfake and real-Kafka tests. -v so the log shows which tests ran against
# real broker processes; -count=1 so nothing is served from the test cache.
# Two packages at a time (go's default here) and the e2e tests one after the other: with three
# packages and parallel e2e tests the CPU was saturated and the quota test's copy rates fell
# below what it asserts (two CI runs). KMIRROR_BIN: the tests that run kmirror as a process use the binary built here once.
# Then the short soak (issue 17: 54 seeded faults of all 18 kinds against the checker, about 3
# minutes) on its own, after everything else, so that no other real-Kafka test shares the two
# cores with it; SOAK_SEED picks its fault schedule (docs/RELIABILITY.md).
SOAK_SEED ?= 1
test: test-deps build
	KMIRROR_BIN=$(abspath $(BIN)) $(GO) test -count=1 -timeout 45m -v -skip '^TestSoak$$' $(TESTFLAGS) ./... 2>&1 | scripts/test-summary.sh
	KMIRROR_SOAK=short KMIRROR_SOAK_SEED=$(SOAK_SEED) KMIRROR_BIN=$(abspath $(BIN)) \
	  KMIRROR_SOAK_REPORT=$(abspath bin/soak-report.json) $(GO) test -count=1 -timeout 20m -v \
	  -run '^TestSoak$$' ./soak/ 2>&1 | scripts/test-summary.sh

# The version matrix (docs/versions.md): every source release x destination release,
# each pair's e2e checks, then the table (source, destination, mode, checks, time).
# make test runs the reduced matrix (e2e's TestVersionMatrix without KMIRROR_MATRIX).
matrix: test-deps
	@mkdir -p bin
	KMIRROR_MATRIX=full KMIRROR_MATRIX_OUT=$(abspath bin/matrix.md) $(GO) test -count=1 -timeout 90m -v \
	  -run '^TestVersionMatrix$$' ./e2e/ 2>&1 | scripts/test-summary.sh; status=$$?; \
	  echo "version matrix ($$(date -u +%F)):"; cat bin/matrix.md; exit $$status

# The seeded fault-injection soak (docs/RELIABILITY.md): MODE=long (default) runs
# FAULTS (default 1,000) faults, about an hour; MODE=short runs 54.
# SEED=N replays a run's fault schedule (give the MODE it ran in); the report is
# bin/soak-report.json, and a failing run keeps every log and names where.
SEED   ?=
FAULTS ?=
MODE   ?= long
soak: test-deps build
	@mkdir -p bin
	KMIRROR_SOAK=$(MODE) KMIRROR_SOAK_SEED=$(SEED) KMIRROR_SOAK_FAULTS=$(FAULTS) KMIRROR_BIN=$(abspath $(BIN)) \
	  KMIRROR_SOAK_REPORT=$(abspath bin/soak-report.json) $(GO) test -count=1 -timeout 4h -v \
	  -run '^TestSoak$$' ./soak/ 2>&1 | scripts/test-summary.sh

# Issue 21's kill-at-each-step test alone (e2e/routekill_test.go, about 90 s; make test runs it
# too): two kmirror processes behind HAProxy, the switch's driver SIGKILLed in the middle of
# each step. RUNS=N repeats it; STEP=at-freezing (a route name) runs one step.
RUNS ?= 1
STEP ?=
chaos: test-deps
	$(GO) test -count=$(RUNS) -timeout 60m -v -run '^TestRouteSwitchDriverKilledAtEachStep$$/$(STEP)' ./e2e/ 2>&1 | scripts/test-summary.sh

# Fast loop for local work: no real Kafka.
test-short:
	KMIRROR_SKIP_REAL_KAFKA=1 $(GO) test -count=1 -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	@# the kill-at-each-step test's hook (instance/routedrive_pause.go) builds only with its tag
	$(GO) vet -tags kmirror_testhooks ./instance/
	@# generated code must be what its definitions give (compared in memory: no dirty tree)
	cd protocol && $(GO) run ./internal/gen -check && \
	  $(GO) run ./internal/gen -check -defs testdata/describe_v0 -out describe_v0_generated_test.go

# Every fuzz target of every package, FUZZTIME each.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$target for $(FUZZTIME)"; \
	    $(GO) test $$pkg -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

# Every benchmark once (bench/README.md). The mirror benchmark runs the kmirror
# binary built here as a process of its own, beside MirrorMaker 2's JVM; -p 1 so
# that the benchmark packages never run at the same time (they would share the cores).
bench: test-deps build
	KMIRROR_BIN=$(abspath $(BIN)) $(GO) test -p 1 -run '^$$' -bench . -benchtime 1x -timeout 60m ./bench/...

# The proxy benchmark alone (bench/README.md, Proxy): ROUNDS paired rounds (default 7);
# ROUNDS=2 for a quick loop, SCENARIO=small or large for one workload, ENGINE2=gnet for a
# second proxy on the other plaintext engine in the same rounds.
bench-proxy: build
	KMIRROR_BIN=$(abspath $(BIN)) KMIRROR_BENCH_ROUNDS=$(or $(ROUNDS),7) KMIRROR_BENCH_PROXY_SCENARIO=$(SCENARIO) \
	  KMIRROR_BENCH_PROXY_ENGINE2=$(ENGINE2) \
	  $(GO) test -v -run '^$$' -bench . -benchtime 1x -timeout 60m ./bench/proxy/

# Static linux binaries (amd64, arm64) with version, commit and build date in
# `kmirror version`, and SHA256SUMS, in bin/release/; then checks them
# (scripts/release-check.sh). VERSION defaults to `git describe`.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
DATE    := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
RELEASE_LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)

release:
	rm -rf bin/release && mkdir -p bin/release
	for arch in amd64 arm64; do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' \
	    -o bin/release/kmirror-$(VERSION)-linux-$$arch ./cmd/kmirror || exit 1; \
	done
	cd bin/release && sha256sum kmirror-* > SHA256SUMS
	./scripts/release-check.sh bin/release $(VERSION) $(COMMIT) $(DATE)

clean:
	rm -rf bin
