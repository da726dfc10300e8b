#!/usr/bin/env bash
# Start or stop the AWS emulator the tests and `make dev` talk to.
#   localstack/emulator.sh start   # moto_server on 127.0.0.1:${EMULATOR_PORT:-4566} unless one answers
#   localstack/emulator.sh stop
#   localstack/emulator.sh who     # what answers on the port: none, make-dev, emulator.sh or other
# With Docker, `docker compose -f localstack/docker-compose.yml up` runs LocalStack instead;
# then export AWS_ENDPOINT_URL=http://127.0.0.1:4566 and nothing here is needed.
set -euo pipefail
port=${EMULATOR_PORT:-4566}
pidfile=${TMPDIR:-/tmp}/relay-emulator-$port.pid
url=http://127.0.0.1:$port

up() { curl -fsS -o /dev/null "$url/moto-api/" 2>/dev/null || curl -fsS -o /dev/null "$url/_localstack/health" 2>/dev/null; }

case "${1:-}" in
start)
  if up; then echo "emulator already answering on $url"; exit 0; fi
  # moto with DynamoDB transactions isolated as in AWS (see the script), run
  # by the python3 beside moto_server (pyenv shim or virtualenv), which has moto.
  py=python3
  if ms=$(command -v moto_server) && [ -x "$(dirname "$ms")/python3" ]; then py=$(dirname "$ms")/python3; fi
  MOTO_ACCOUNT_ID=000000000000 nohup "$py" "$(dirname "$0")/../internal/local/emulator/moto_server.py" -H 127.0.0.1 -p "$port" >"${TMPDIR:-/tmp}/relay-emulator-$port.log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do up && { echo "emulator on $url"; exit 0; }; sleep 0.2; done
  echo "emulator did not start; see ${TMPDIR:-/tmp}/relay-emulator-$port.log" >&2; exit 1
  ;;
who)
  if ! up; then echo none
  # make dev's (relay dev's) own moto runs a temporary copy of the wrapper,
  # relay-moto-<random>.py (internal/local/emulator).
  elif pgrep -f "relay-moto-[^ ]*\.py -H 127\.0\.0\.1 -p $port\$" >/dev/null; then echo make-dev
  elif [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then echo emulator.sh
  else echo other; fi
  ;;
stop)
  # moto spends minutes at full CPU freeing its in-memory state after a
  # SIGTERM, slowing whatever runs next: it holds nothing worth keeping.
  if [ -f "$pidfile" ]; then kill -9 "$(cat "$pidfile")" 2>/dev/null || true; rm -f "$pidfile"; fi
  ;;
*) echo "usage: $0 start|stop|who" >&2; exit 2 ;;
esac
