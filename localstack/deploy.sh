#!/usr/bin/env bash
# Deploy a synthesized stack onto the emulator at AWS_ENDPOINT_URL as
# `make deploy` deploys it to AWS: cdk bootstrap, then cdk deploy of the
# cloud assembly make synth wrote. make deploy-emulator and
# localstack/deploy_test.go run it; the emulator's gaps are filled in
# internal/local/emulator/moto_server.py, never in the template.
#   AWS_ENDPOINT_URL=http://127.0.0.1:4566 localstack/deploy.sh [CDK_OUT [OUTPUTS_JSON]]
set -euo pipefail
: "${AWS_ENDPOINT_URL:?set AWS_ENDPOINT_URL to the emulator to deploy onto (make deploy-emulator starts one)}"
out=${1:-cdk.out}
outputs=${2:-$out/emulator-outputs.json}
cdk=$(cd "$(dirname "$0")/.." && pwd)/node_modules/.bin/cdk
[ -x "$cdk" ] || { echo "deploy.sh: $cdk is missing: run npm ci (make synth does)" >&2; exit 1; }

# The emulator takes any credentials; its region is us-east-1.
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
unset AWS_PROFILE AWS_SESSION_TOKEN
# cdk deploy hands CloudFormation the template's URL in the bootstrap
# bucket, built from the S3 endpoint as http://127.0.0.1:PORT/<bucket>/<key>;
# moto takes "127" for a bucket name there, but reads the path for localhost.
export AWS_ENDPOINT_URL_S3_FOR_CLOUDFORMATION=${AWS_ENDPOINT_URL/127.0.0.1/localhost}
# The last: the pinned CLI's bundled AWS SDK warns on Node.js 20 about SDK
# versions to come (the Makefile says more).
export CDK_DISABLE_VERSION_CHECK=1 CDK_DISABLE_CLI_TELEMETRY=true JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED=true

# --app on the assembly: no second synth, and the environment is the
# credentials' (account and region), as for make deploy.
"$cdk" bootstrap --no-notices --app "$out"
start=$(date +%s)
# --method=direct: moto executes a change set in template order, ignoring
# DependsOn (the API's deployment before its methods); creating the stack
# directly follows the dependencies.
"$cdk" deploy --no-notices --app "$out" --method=direct --require-approval never --outputs-file "$outputs"
echo "deployed onto $AWS_ENDPOINT_URL in $(( $(date +%s) - start ))s (cdk deploy); outputs in $outputs"
