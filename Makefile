# Relay Batch. `make dev` runs the service locally; `make test` runs every test.
SHELL := /bin/bash
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1

FUNCTIONS := $(notdir $(wildcard functions/*))
GO_PACKAGES := ./...
FUZZTIME ?= 5s
EMULATOR := localstack/emulator.sh

.PHONY: all build dev test unit integration fuzz-short fuzz bench bench-all vet clean

all: build

## build: every function as an arm64 bootstrap for provided.al2023, plus the CLI
build: $(addprefix build/,$(addsuffix /bootstrap,$(FUNCTIONS))) build/relay

build/%/bootstrap: $(shell find functions internal -name '*.go' -not -name '*_test.go') go.mod go.sum
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $@ ./functions/$*

build/relay: $(shell find cmd internal -name '*.go' -not -name '*_test.go') go.mod go.sum
	go build -o $@ ./cmd/relay

## dev: the whole service on the emulator, with the mock provider
dev:
	go run ./cmd/relay dev

vet:
	go vet $(GO_PACKAGES)
	@test -z "$$(gofmt -l cmd functions internal infra localstack events)" || { gofmt -l cmd functions internal infra localstack events; echo "gofmt needed"; exit 1; }

## test: unit, integration (emulator), brief fuzzing and infra tests
test: vet build
	@if [ -z "$$AWS_ENDPOINT_URL" ]; then \
	  trap 'EMULATOR_PORT=4599 $(EMULATOR) stop' EXIT; EMULATOR_PORT=4599 $(EMULATOR) start && \
	  AWS_ENDPOINT_URL=http://127.0.0.1:4599 $(MAKE) --no-print-directory test-all; \
	else $(MAKE) --no-print-directory test-all; fi

test-all: unit fuzz-short cfn-lint

unit:
	go test -count=1 -timeout 12m $(GO_PACKAGES)

## fuzz-short: each fuzz target briefly (FUZZTIME per target)
fuzz-short:
	@set -e; for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' internal | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$pkg/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz $$pkg $$f"; out=$$(go test ./$$pkg -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) 2>&1) || { echo "$$out"; exit 1; }; \
	  done; done

## fuzz: every fuzz target (request decoders, the JSONL/CSV scanners, file
## names, cron, webhook URLs, gateway events, workflow callback answers) for
## FUZZ_LONG each, one after the other, so the run is bounded: about a
## minute per target. A failing input is written under the package's
## testdata/fuzz/<target>/, where it stays as a seed once the bug is fixed.
FUZZ_LONG ?= 60s
fuzz:
	@set -eo pipefail; log=$$(mktemp); trap 'rm -f $$log' EXIT; \
	for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' internal | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$pkg/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    printf 'fuzz %-20s %-32s ' $$pkg $$f; \
	    if go test ./$$pkg -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZ_LONG) -timeout=15m >$$log 2>&1; then \
	      grep -o 'execs: [0-9]*' $$log | tail -n 1; \
	    else echo FAILED; cat $$log; exit 1; fi; \
	  done; done

## bench: the end-to-end benchmark, which writes BENCHMARKS.md and fails
## on a missed bar (localstack/e2e_bench_test.go, build tag bench; about 8
## minutes), then the Go benchmarks; on an emulator of its own unless
## AWS_ENDPOINT_URL is set, as loadtest.mk's runs
BENCH_EMULATOR_PORT ?= 4595
bench:
	$(call run-with-emulator,$(MAKE) --no-print-directory bench-all,$(BENCH_EMULATOR_PORT))

# bench-all runs both even when the first fails (the old engine misses its
# bars), and fails if either did. The go test line is the one the test
# writes into BENCHMARKS.md as its command (benchCommand).
bench-all:
	@status=0; \
	go test -tags bench -run '^TestEndToEndBenchmark$$' -count=1 -v -timeout 12m ./localstack || status=$$?; \
	go test -run='^$$' -bench=. -benchmem $(GO_PACKAGES) || status=$$?; \
	exit $$status

clean:
	rm -rf build cdk.out

-include infra/infra.mk
-include loadtest.mk
