# Infrastructure targets, included by the Makefile. The CDK app is Go
# (infra/, `go run ./infra` from cdk.json); the cdk CLI is the pinned npm dev
# dependency in node_modules, never a global install.
#
#   make synth                  cdk.out/ offline: no network, no AWS account
#   make deploy                 cdk deploy to the AWS account of your credentials
#   make destroy                cdk destroy of that stack
#   make deploy-local           cdklocal deploy to a running LocalStack
#   make deploy-emulator        cdk deploy of cdk.out onto a fresh moto (no Docker, no account)
#   make infra-test             assertions tests + cfn-lint on cdk.out
#
# CDK_ARGS passes context, e.g. CDK_ARGS="-c config=prod.yaml -c alarmEmail=ops@example.com".

CDK_ARGS ?=
# CDK_OUT is where make synth writes the cloud assembly (and what
# make deploy-emulator deploys): the README walkthrough test writes its own.
CDK_OUT ?= cdk.out
CDK := node_modules/.bin/cdk
CDKLOCAL := node_modules/.bin/cdklocal
# W3005 (a DependsOn that a reference already implies) is what CDK emits for
# every function's role policy; nothing else is ignored.
CFN_LINT := cfn-lint --ignore-checks W3005 --
LOCALSTACK_URL ?= http://localhost:4566
# LocalStack runs functions on the host's architecture.
LOCAL_GOARCH ?= $(shell go env GOHOSTARCH)
LOCAL_BUILD = build/local-$(LOCAL_GOARCH)
INFRA_FUNCTIONS := $(notdir $(patsubst %/,%,$(dir $(wildcard functions/*/main.go))))

.PHONY: synth deploy destroy deploy-local deploy-emulator infra-test cfn-lint lint-synthesized build-local

synth deploy destroy deploy-local infra-test cfn-lint: export CDK_DISABLE_VERSION_CHECK := 1
synth deploy destroy deploy-local infra-test cfn-lint: export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

# npm ci only when the lock file changes, and not when it ran already
# without make (npm writes node_modules/.package-lock.json on every
# install: newer than package.json and the lock file, it is theirs).
node_modules/.installed: package.json package-lock.json
	@if [ node_modules/.package-lock.json -nt package-lock.json ] && [ node_modules/.package-lock.json -nt package.json ]; then \
	  echo "node_modules is installed from package-lock.json already (npm ci ran)"; \
	else npm ci --no-audit --no-fund; fi
	@touch $@

## synth: the CloudFormation template and assets in cdk.out/
synth: build node_modules/.installed
	$(CDK) synth --no-notices -q -o $(CDK_OUT) $(CDK_ARGS)

## deploy: the stack to AWS (needs credentials and `cdk bootstrap` once per account and region);
## a models file with a model on this machine (the default relay.yaml) is refused
deploy: build node_modules/.installed
	$(CDK) deploy --no-notices -c requireRemoteModels=true $(CDK_ARGS)

## destroy: delete the stack deploy made (the same CDK_ARGS); with deletion
## protection (the default) the table, bucket, schedule group and log groups stay
destroy: build node_modules/.installed
	$(CDK) destroy --no-notices $(CDK_ARGS)

## deploy-local: the stack to LocalStack (needs Docker and LOCALSTACK_AUTH_TOKEN to run LocalStack)
deploy-local: build-local node_modules/.installed
	@curl -sf $(LOCALSTACK_URL)/_localstack/health >/dev/null || { \
	  echo "LocalStack is not running at $(LOCALSTACK_URL): start it with Docker and LOCALSTACK_AUTH_TOKEN set (README)"; exit 1; }
	$(CDKLOCAL) bootstrap --no-notices
	$(CDKLOCAL) deploy --no-notices --require-approval never \
	  -c build=$(LOCAL_BUILD) -c arch=$(LOCAL_GOARCH) -c deletionProtection=false $(CDK_ARGS)

## deploy-emulator: what make synth writes (the arm64 build, the same
## CDK_ARGS) deployed with cdk bootstrap + cdk deploy onto the emulator at
## AWS_ENDPOINT_URL, else onto a fresh one started on DEPLOY_EMULATOR_PORT
## (left running for what follows; localstack/emulator.sh stop ends it). It
## shows that CloudFormation creates the stack and its references resolve;
## the functions cannot run there (no Lambda runtime): localstack/deploy_test.go
## runs their code on the deployed resources with the local runtime.
## The port is checked before anything is built: make dev's own emulator
## there is named, with what to do (stop make dev first).
DEPLOY_EMULATOR_PORT ?= 4566
# What the AWS CLI needs besides the endpoint: the emulator takes any
# credentials, and its region is us-east-1.
EMULATOR_AWS_ENV = AWS_DEFAULT_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
deploy-emulator:
	@if [ -n "$$AWS_ENDPOINT_URL" ]; then \
	  curl -sS -o /dev/null "$$AWS_ENDPOINT_URL" 2>/dev/null || { echo "make deploy-emulator: nothing answers at AWS_ENDPOINT_URL=$$AWS_ENDPOINT_URL: start that emulator, or unset AWS_ENDPOINT_URL to have a fresh one started on $(DEPLOY_EMULATOR_PORT)" >&2; exit 1; }; \
	else url=http://127.0.0.1:$(DEPLOY_EMULATOR_PORT); case $$(EMULATOR_PORT=$(DEPLOY_EMULATOR_PORT) $(EMULATOR) who) in \
	  none) ;; \
	  make-dev) echo "make deploy-emulator: make dev's emulator answers on $$url, holding make dev's table relay: stop make dev first (Ctrl-C where it runs; its data goes with it), then make deploy-emulator again. Or deploy beside it: make deploy-emulator DEPLOY_EMULATOR_PORT=4567" >&2; exit 1;; \
	  *) echo "make deploy-emulator: something already answers on $$url (an emulator left from an earlier deploy?): stop it (EMULATOR_PORT=$(DEPLOY_EMULATOR_PORT) $(EMULATOR) stop), or deploy onto it with AWS_ENDPOINT_URL=$$url (moto has no rollback: a fresh one is safer)" >&2; exit 1;; \
	esac; fi
	@$(MAKE) --no-print-directory synth
	@if [ -n "$$AWS_ENDPOINT_URL" ]; then exec localstack/deploy.sh $(CDK_OUT); fi; \
	url=http://127.0.0.1:$(DEPLOY_EMULATOR_PORT); \
	EMULATOR_PORT=$(DEPLOY_EMULATOR_PORT) $(EMULATOR) start && AWS_ENDPOINT_URL=$$url localstack/deploy.sh $(CDK_OUT) && \
	echo "the emulator keeps running, with the stack relay in it; for the AWS CLI and relay dev --stack:" && \
	echo "  export AWS_ENDPOINT_URL=$$url $(EMULATOR_AWS_ENV)" && \
	echo "stop it with EMULATOR_PORT=$(DEPLOY_EMULATOR_PORT) $(EMULATOR) stop"

build-local:
	@set -e; for f in $(INFRA_FUNCTIONS); do \
	  GOOS=linux GOARCH=$(LOCAL_GOARCH) CGO_ENABLED=0 go build -tags lambda.norpc -trimpath -o $(LOCAL_BUILD)/$$f/bootstrap ./functions/$$f; \
	done

## infra-test: CDK assertions on the template, then cfn-lint on what `make synth` wrote
infra-test: synth
	go test -count=1 ./infra/...
	$(CFN_LINT) cdk.out/*.template.json

## cfn-lint: lint what `make synth` wrote (make test runs the assertions with the unit tests)
cfn-lint: synth
	$(CFN_LINT) cdk.out/*.template.json

# lint-synthesized: cfn-lint without synthesizing again (make test synthesized)
lint-synthesized:
	$(CFN_LINT) cdk.out/*.template.json
