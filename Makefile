# Relay Batch. `make dev` runs the service locally; `make test` runs every test.
SHELL := /bin/bash
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1
# The AWS SDK for JavaScript inside the pinned cdk CLI warns on Node.js 20
# (NodeVersionSupportWarning) that SDK versions published after January
# 2027 will need Node.js 22; the pinned CLI bundles its SDK and runs on 20.
export AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED := true

FUNCTIONS := $(notdir $(wildcard functions/*))
GO_PACKAGES := ./...
FUZZTIME ?= 5s
EMULATOR := localstack/emulator.sh

.PHONY: all build dev test test-deps test-all test-go unit fuzz-short fuzz bench bench-all vet clean

# TEST_TAGS are the build tags of the test kinds make unit leaves out
# (README "Tests"): browser (Chromium), nodesdk (Node.js and the npm
# packages), deploy (the CDK CLI and cdk.out), which need more than the
# emulator, and sdk (the official Go SDKs, openai-go and anthropic-sdk-go,
# against the mock provider and a delivered webhook), which needs Go alone
# but whose test binaries, linking the SDKs, were make unit's slowest to
# build. make test and make vet build and run them; make unit does not.
TEST_TAGS := browser nodesdk deploy sdk

# run-with-emulator runs $(1) with AWS_ENDPOINT_URL set, starting (and
# stopping) an emulator on port $(2) unless one is configured already:
# make test, bench, loadtest and chaos.
define run-with-emulator
	@if [ -z "$$AWS_ENDPOINT_URL" ]; then \
	  trap 'EMULATOR_PORT=$(2) $(EMULATOR) stop' EXIT; EMULATOR_PORT=$(2) $(EMULATOR) start && \
	  AWS_ENDPOINT_URL=http://127.0.0.1:$(2) $(1); \
	else $(1); fi
endef

# FUZZ_TARGETS is every fuzz target under internal/, as package:FuzzName.
FUZZ_TARGETS = $(shell for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' internal | xargs -n1 dirname | sort -u); do \
  grep -h '^func Fuzz' $$pkg/*_test.go | sed "s|^func \(Fuzz[A-Za-z0-9_]*\).*|$$pkg:\1|"; done)

all: build

## build: every function as an arm64 bootstrap for provided.al2023, plus the CLI
build: $(addprefix build/,$(addsuffix /bootstrap,$(FUNCTIONS))) build/relay

build/%/bootstrap: $(shell find functions internal -path internal/local -prune -o -name '*.go' -not -name '*_test.go' -print) go.mod go.sum
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $@ ./functions/$*

build/relay: $(shell find cmd internal -name '*.go' -not -name '*_test.go') go.mod go.sum
	go build -o $@ ./cmd/relay

## dev: the whole service on the emulator, with the mock provider. The
## built binary rather than go run, which exits 1 after a Ctrl-C.
## MOCK_LATENCY (a duration, 200ms) and MOCK_ERROR_RATE (0 to 1) slow and
## fail the mock provider's answers; STACK=relay runs on the stack
## make deploy-emulator deployed at AWS_ENDPOINT_URL (relay dev --help);
## with it, RUNTIME=lambda runs each function as its bootstrap under the
## Lambda Runtime Interface Emulator (README "Lambda mode").
DEV_FLAGS = $(if $(MOCK_LATENCY),--mock-latency $(MOCK_LATENCY)) $(if $(MOCK_ERROR_RATE),--mock-error-rate $(MOCK_ERROR_RATE)) $(if $(STACK),--stack $(STACK)) $(if $(filter lambda,$(RUNTIME)),--lambda)
dev: build/relay
	@exec build/relay dev $(DEV_FLAGS)

vet:
	go vet -tags '$(TEST_TAGS)' $(GO_PACKAGES)
	@test -z "$$(gofmt -l cmd functions internal infra localstack events)" || { gofmt -l cmd functions internal infra localstack events; echo "gofmt needed"; exit 1; }

## test: every Go test of every kind on the emulator (test-go), brief
## fuzzing and infra tests, after test-deps (first even under make -j, so a
## missing tool stops it at once). It synthesizes first: the deploy tests
## (localstack/deploy_test.go) deploy cdk.out onto an emulator of their
## own, and cfn-lint lints it.
test: test-deps
	@$(MAKE) --no-print-directory vet build synth
	$(call run-with-emulator,$(MAKE) --no-print-directory test-all,4599)

## test-deps: what make test needs besides Go, on a fresh Debian machine.
## Debian's packages it lacks (chromium for the browser tests, curl for the
## emulator script, nodejs and npm for the CDK: the infra tests run it
## through jsii, cfn-lint lints what the pinned cdk synthesizes) it installs
## with apt-get when root, then the pinned npm packages (npm ci): the CDK CLI
## and the official Node SDKs that localstack/node_sdk_test.go runs. Not root,
## or missing moto (5.2.1: internal/local/emulator/moto_server.py) or cfn-lint (Python; the machine image ships them), it
## stops at once with one line naming the one command to run.
## CHROMIUM is where the browser tests look for Chromium: chromiumPath in
## localstack/browser_test.go, Debian's path; change it only to try this.
CHROMIUM ?= /usr/bin/chromium
GO_VERSION = $(shell sed -n 's/^go //p' go.mod)
test-deps:
	@command -v go >/dev/null || { echo "make test: Go $(GO_VERSION) (go.mod) is not on PATH: run  export PATH=\"\$$PATH:/usr/local/go/bin\"  (or install it from https://go.dev/dl/)" >&2; exit 1; }
	@py=; if ! command -v moto_server >/dev/null && ! python3 -c 'import moto.server' 2>/dev/null; then py="'moto[server]==5.2.1'"; fi; \
	command -v cfn-lint >/dev/null || py="$$py cfn-lint"; \
	py=$${py# }; if [ -n "$$py" ]; then echo "make test: missing Python's $$py (moto is the AWS emulator unless AWS_ENDPOINT_URL names one, and what localstack/deploy_test.go deploys the stack onto in any case): run  pip install $$py" >&2; exit 1; fi
	@pkgs=; [ -x "$(CHROMIUM)" ] || pkgs=chromium; \
	for c in curl node:nodejs npm; do command -v $${c%%:*} >/dev/null || pkgs="$$pkgs $${c#*:}"; done; \
	pkgs=$${pkgs# }; [ -n "$$pkgs" ] || exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make test: missing Debian's $$pkgs, which only root can install: run  sudo sh -c 'apt-get update && apt-get install -y $$pkgs'  then make test again" >&2; exit 1; fi; \
	echo "make test: installing $$pkgs (apt-get)"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkgs >/dev/null || { echo "make test: apt-get install $$pkgs failed" >&2; exit 1; }; \
	[ -x "$(CHROMIUM)" ] || { echo "make test: apt-get installed chromium, but $(CHROMIUM) is still missing" >&2; exit 1; }
	@$(MAKE) -s --no-print-directory node_modules/.installed

test-all: test-go fuzz-short lint-synthesized

## test-go: every Go test, the tagged kinds included, on the emulator in
## AWS_ENDPOINT_URL (make test starts one). Four parallel tests a package,
## not one per core: most of an integration test's time is spent waiting
## (a tick, a lease, a provider's latency), not computing.
test-go:
	go test -count=1 -timeout 20m -parallel 4 -tags '$(TEST_TAGS)' $(GO_PACKAGES)

## unit: the fast tests (on two cores otherwise idle: 53-55 s from a
## fresh clone whose modules are built, 28 s once built; 103-107 and 54 s
## of CPU, where it took 137 and 73 before the seven functions' init tests
## became one test binary, the SDK tests a tag and the per-variable init
## checks in-process; README "Tests"):
## go test -short, which skips every test that needs the emulator
## (emutest), without the tagged kinds (sdk too): Go alone, no emulator,
## no AWS_ENDPOINT_URL, no Chromium or Node.js. Four parallel tests a
## package, as test-go, and four packages at once (-p 4,
## not the cores' 2): the engine's tests wait out leases of seconds, not
## compute, while the others compile and link. Every package but localstack/, whose tests all
## need the emulator, and infra/, whose tests all need the stack synthesized
## through jsii: under -short each would be compiled and linked only to
## skip them (infra/ links the CDK), and make test runs both. -vet=off:
## make test runs make vet first, every analyzer on the same packages.
## -ldflags='-s -w': no symbol table and no DWARF in the test binaries,
## the slowest part of each link, which no test reads (stack traces and
## runtime.FuncForPC use the pcln table; a debugger would need them: go
## test -c without it).
## UNIT_FIRST are listed first (go list keeps the first of a package named
## twice), which go test builds and starts first: the packages whose tests
## run longest, the engine's waiting out leases, so that they wait while
## the rest compile and link rather than after.
UNIT_FIRST := ./internal/engine ./cmd/relay
unit:
	go test -short -count=1 -p 4 -parallel 4 -vet=off -ldflags='-s -w' $$(go list -e $(UNIT_FIRST) $(GO_PACKAGES) | grep -v -E '/(localstack|infra)$$')

## fuzz-short: each fuzz target briefly (FUZZTIME per target)
fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%:*} f=$${t#*:}; \
	  echo "fuzz $$pkg $$f"; run() { go test ./$$pkg -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) 2>&1; }; \
	  out=$$(run) || case "$$out" in \
	    *"Failing input written"*) echo "$$out"; exit 1;; \
	    *"context deadline exceeded"*) echo "  the fuzzing engine's own deadline at the end of -fuzztime, no failing input: once more"; out=$$(run) || { echo "$$out"; exit 1; };; \
	    *) echo "$$out"; exit 1;; \
	  esac; \
	done

## fuzz: every fuzz target (request decoders, the JSONL/CSV scanners, the
## duplicate-member checker, file names, cron, webhook URLs, gateway events,
## workflow callback answers) for
## FUZZ_LONG each, one after the other, so the run is bounded: about a
## minute per target. A failing input is written under the package's
## testdata/fuzz/<target>/, where it stays as a seed once the bug is fixed.
FUZZ_LONG ?= 60s
fuzz:
	@set -eo pipefail; log=$$(mktemp); trap 'rm -f $$log' EXIT; \
	for t in $(FUZZ_TARGETS); do pkg=$${t%:*} f=$${t#*:}; \
	  printf 'fuzz %-20s %-32s ' $$pkg $$f; \
	  if go test ./$$pkg -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZ_LONG) -timeout=15m >$$log 2>&1; then \
	    grep -o 'execs: [0-9]*' $$log | tail -n 1; \
	  else echo FAILED; cat $$log; exit 1; fi; \
	done

## bench: the end-to-end benchmarks, which write BENCHMARKS.md and fail
## on a missed bar (localstack/e2e_bench_test.go and bench_large_test.go,
## build tag bench; about 12 minutes), then the Go benchmarks; on an
## emulator of its own unless
## AWS_ENDPOINT_URL is set (run-with-emulator)
BENCH_EMULATOR_PORT ?= 4595
bench:
	$(call run-with-emulator,$(MAKE) --no-print-directory bench-all,$(BENCH_EMULATOR_PORT))

# bench-all runs all three even when one fails, and fails if any did. The go test line is the one the test
# writes into BENCHMARKS.md as its command (benchCommand).
bench-all:
	@status=0; \
	go test -tags bench -run '^TestEndToEndBenchmark$$' -count=1 -v -timeout 12m ./localstack || status=$$?; \
	go test -tags bench -run '^TestLargeBenchmark$$' -count=1 -v -timeout 25m ./localstack || status=$$?; \
	go test -run='^$$' -bench=. -benchmem $(GO_PACKAGES) || status=$$?; \
	exit $$status

clean:
	rm -rf build cdk.out

-include infra/infra.mk
-include loadtest.mk
