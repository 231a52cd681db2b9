#!/usr/bin/env bash
# Install and start what the test suite needs, lint, then run every test (or, with --bench, the benchmarks).
# Works on a fresh Debian machine as root; reuses PostgreSQL and Redis when they already run.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p var

apt_install() {
  echo "==> apt-get install $*"
  [ -n "$(find /var/lib/apt/lists -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

missing=()
command -v pg_ctlcluster >/dev/null || missing+=(postgresql)
command -v redis-server >/dev/null || missing+=(redis-server)
[ -x /usr/bin/chromium ] || missing+=(chromium)
fc-list 2>/dev/null | grep -qi liberation || missing+=(fonts-liberation)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

pg_ok() { psql "$1" -Atqc 'select 1' >/dev/null 2>&1; }
pg_url="postgres://postgres@127.0.0.1:5432/postgres"
if ! pg_ok "$pg_url"; then
  echo "==> starting PostgreSQL"
  for version in $(ls /etc/postgresql 2>/dev/null); do
    pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null || true
  done
  for _ in $(seq 20); do pg_ok "$pg_url" && break; sleep 0.5; done
fi
if ! pg_ok "$pg_url"; then
  # No trust-auth server on 5432 (e.g. a fresh apt install): a throwaway cluster of our own on 54329.
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  pg_url="postgres://postgres@127.0.0.1:54329/postgres"
  if ! pg_ok "$pg_url"; then
    echo "==> starting a throwaway PostgreSQL in var/pgdata on port 54329"
    chown -R postgres var 2>/dev/null || true
    as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
    [ -f var/pgdata/PG_VERSION ] || as_pg "$bin/initdb" -D var/pgdata -U postgres --auth=trust >/dev/null
    as_pg "$bin/pg_ctl" -D var/pgdata -o "-p 54329 -k /tmp -c listen_addresses=127.0.0.1" -l var/pg.log -w start >/dev/null
  fi
  export DATABASE_URL="postgres://postgres@127.0.0.1:54329/ootci"
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "==> starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir /tmp >/dev/null
  for _ in $(seq 20); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.25; done
fi

source scripts/venv.sh
export DJANGO_DEBUG=true

echo "==> ruff, migrations"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python manage.py makemigrations --check --dry-run >/dev/null || {
  echo "models and migrations differ: run manage.py makemigrations"; exit 1; }

if [ "${1:-}" = "--bench" ]; then
  shift
  echo "==> benchmarks"
  exec .venv/bin/pytest -p no:randomly -s -q tests/bench/bench_*.py "$@"
fi
if [ "${1:-}" = "--fuzz" ]; then
  shift
  echo "==> fuzz (FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-250} per target)"
  exec .venv/bin/pytest -p no:randomly -p no:xdist -s -q tests/fuzz "$@"
fi
# The SQLite lane: what `make run` uses (SQLite) migrated and seeded, then the HUD queries and the relay's
# webhook → dispatch → callback → sweeper tests on it, and the per-test pages' stores and the disabled-test import.
# It runs beside the PostgreSQL lane (the suite waits on its stores more than it computes: the two lanes together
# keep the two cores busy), on Redis databases of its own, and its output follows the PostgreSQL lane's.
lane_pid=""
if [ $# -eq 0 ]; then
  lane="sqlite:///$PWD/var/lane.sqlite3"
  rm -f var/lane.sqlite3 var/test-sqlite-gw*.sqlite3 var/lane.log
  DATABASE_URL=$lane REDIS_URL=redis://127.0.0.1:6379/8 setsid bash -c '
    set -e
    .venv/bin/python manage.py migrate -v 0
    .venv/bin/python manage.py seed_demo
    exec .venv/bin/pytest -n 2 -p no:cacheprovider tests/hud/figures/test_queries.py tests/relay/endpoints/test_webhook.py \
      tests/relay/github/test_outbox.py tests/relay/endpoints/test_callback.py tests/relay/endpoints/test_ingest.py \
      tests/relay/reliability/test_sweeper.py tests/ootci/test_seed_demo.py tests/hud/history/test_history.py \
      tests/hud/failing/test_classes.py tests/ootci/disabled/test_registry.py tests/ootci/test_case_recent.py' > var/lane.log 2>&1 &
  lane_pid=$!
  trap '[ -z "$lane_pid" ] || kill -- -"$lane_pid" 2>/dev/null || true' EXIT
fi

echo "==> pytest (PostgreSQL)"
pg_status=0
.venv/bin/pytest -n 2 "$@" || pg_status=$?
[ -n "$lane_pid" ] || exit "$pg_status"

echo "==> SQLite lane: migrate, seed_demo, HUD queries, relay services, test history on SQLite"
lane_status=0
wait "$lane_pid" || lane_status=$?
lane_pid=""
cat var/lane.log
[ "$pg_status" -eq 0 ] && [ "$lane_status" -eq 0 ]
