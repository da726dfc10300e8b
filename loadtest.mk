# Load and chaos runs (README "Reliability"); the Makefile includes this.
# Both run the local runtime against the emulator in AWS_ENDPOINT_URL, or
# start a moto_server of their own on a free port as `make test` does, and
# print a report. Their tests sit behind build tags, so `make test` skips them.
#   make loadtest [LOADTEST_TENANTS=8 LOADTEST_BATCHES=5 LOADTEST_ROWS=50]
#   make chaos [CHAOS_SEED=n CHAOS_CHUNK_ROWS=768]

.PHONY: loadtest chaos

LOADTEST_EMULATOR_PORT ?= 4597
CHAOS_EMULATOR_PORT ?= 4596

## loadtest: many tenants submitting and polling at once (≤ 3 minutes)
loadtest:
	$(call run-with-emulator,go test -tags loadtest -run '^TestLoad$$' -count=1 -v -timeout 3m ./localstack,$(LOADTEST_EMULATOR_PORT))

## chaos: crashes, lost and duplicated messages, provider faults, a restart, faults at every AWS call (≤ 10 minutes)
chaos:
	$(call run-with-emulator,go test -tags chaos -run '^TestChaos$$' -count=1 -v -timeout 25m ./localstack,$(CHAOS_EMULATOR_PORT))
