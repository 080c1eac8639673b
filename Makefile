# kmirror — see README.md. Two commands matter on a fresh machine:
#   make run    the demo on embedded clusters
#   make test   everything, real Apache Kafka included
GO        ?= go
FUZZTIME  ?= 60s
TESTFLAGS ?=
BIN       := bin/kmirror
SHELL     := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: all build run test test-deps test-short lint fuzz bench matrix clean

all: lint test

build:
	$(GO) build -o $(BIN) ./cmd/kmirror

run: build
	./$(BIN) demo

test-deps:
	./scripts/test-deps.sh

# Unit, kfake and real-Kafka tests. -v so the log shows which tests ran against
# real broker processes; -count=1 so nothing is served from the test cache.
test: test-deps
	$(GO) test -count=1 -timeout 45m -v $(TESTFLAGS) ./... 2>&1 | scripts/test-summary.sh

# The version matrix (docs/versions.md): every source release x destination release,
# each pair's e2e checks, then the table (source, destination, mode, checks, time).
# make test runs the reduced matrix (e2e's TestVersionMatrix without KMIRROR_MATRIX).
matrix: test-deps
	@mkdir -p bin
	KMIRROR_MATRIX=full KMIRROR_MATRIX_OUT=$(abspath bin/matrix.md) $(GO) test -count=1 -timeout 90m -v \
	  -run '^TestVersionMatrix$$' ./e2e/ 2>&1 | scripts/test-summary.sh; status=$$?; \
	  echo "version matrix ($$(date -u +%F)):"; cat bin/matrix.md; exit $$status

# Fast loop for local work: no real Kafka.
test-short:
	KMIRROR_SKIP_REAL_KAFKA=1 $(GO) test -count=1 -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
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

clean:
	rm -rf bin
