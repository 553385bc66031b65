#!/usr/bin/env bash
# A throw-away PostgreSQL cluster for the server's tests and benchmarks.
#
#   scripts/pg.sh start   # initdb + pg_ctl start on 127.0.0.1 and a free port, creates database "marksync"
#   scripts/pg.sh url     # prints postgres://postgres@127.0.0.1:PORT/marksync
#   scripts/pg.sh stop    # stops the cluster and removes its directory
#   scripts/pg.sh pause   # stops the cluster, keeping its data (an outage, for tests)
#   scripts/pg.sh resume  # starts a paused cluster again, on the same port
#
# Typical use:
#   scripts/pg.sh start && export MARKSYNC_TEST_POSTGRES_URL="$(scripts/pg.sh url)"
#   cargo test -p marksync-server; scripts/pg.sh stop
#
# The cluster runs as the unprivileged user "postgres" (Debian's postgresql package
# creates it), with locale en_US.UTF-8 so the collation trap of PROTOCOL §1 is real:
# the locale is generated when missing; if that cannot be done, C.UTF-8 is used and
# a warning says so. The cluster's directory is a `mktemp -d`, recorded in
# $MARKSYNC_PG_STATE (default: .pg/state in the repository, ignored by git).
# When no PostgreSQL is installed and we are root with apt-get (a fresh CI machine),
# `start` installs Debian's postgresql and locales first (no default cluster).
# Environment: PG_BIN (default: the newest /usr/lib/postgresql/*/bin), PG_PORT (default: a free port).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${MARKSYNC_PG_STATE:-$here/.pg/state}"

find_bin() {
  if [[ -n "${PG_BIN:-}" ]]; then echo "$PG_BIN"; return; fi
  if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"; return
  fi
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  if [[ -z "$d" ]]; then
    install_pg
    d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  fi
  if [[ -z "$d" ]]; then
    echo "pg.sh: no PostgreSQL server binaries (install: apt-get install -y postgresql)" >&2
    exit 1
  fi
  echo "$d"
}

# As root with apt-get (a fresh CI machine): installs Debian's postgresql and
# locales, without the default cluster (we start our own).
install_pg() {
  if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then return 0; fi
  echo "pg.sh: installing postgresql and locales with apt-get" >&2
  mkdir -p /etc/postgresql-common
  [[ -f /etc/postgresql-common/createcluster.conf ]] || echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Options::=--force-confold postgresql locales >&2
}

# Runs a command as the postgres user (or as ourselves when we are not root).
as_pg() {
  if [[ "$(id -u)" -eq 0 ]]; then
    if command -v runuser >/dev/null 2>&1; then
      runuser -u postgres -- "$@"
    else
      su postgres -s /bin/bash -c "$(printf '%q ' "$@")"
    fi
  else
    "$@"
  fi
}

pick_locale() {
  if locale -a 2>/dev/null | grep -qiE '^en_US\.utf-?8$'; then echo en_US.UTF-8; return; fi
  if [[ "$(id -u)" -eq 0 && -f /etc/locale.gen ]] && command -v locale-gen >/dev/null 2>&1; then
    sed -i 's/^# *en_US.UTF-8 UTF-8/en_US.UTF-8 UTF-8/' /etc/locale.gen
    locale-gen >/dev/null 2>&1 || true
    if locale -a 2>/dev/null | grep -qiE '^en_US\.utf-?8$'; then echo en_US.UTF-8; return; fi
  fi
  echo "pg.sh: WARNING: locale en_US.UTF-8 is not available (apt-get install -y locales); using C.UTF-8 — the collation trap test then runs without its trap" >&2
  echo C.UTF-8
}

# Below Linux's ephemeral range (32768-60999 by default): a port probed free
# there can be taken by any socket the tests open before PostgreSQL binds it.
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$(( 20000 + RANDOM % 12000 ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  echo "pg.sh: no free port found" >&2
  exit 1
}

read_state() {
  if [[ ! -f "$state" ]]; then echo "pg.sh: no cluster is running (run: scripts/pg.sh start)" >&2; exit 1; fi
  # shellcheck disable=SC1090
  source "$state"
}

cmd_start() {
  if [[ -f "$state" ]]; then
    # shellcheck disable=SC1090
    source "$state"
    if as_pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
      echo "pg.sh: already running on port $PORT" >&2; return 0
    fi
    rm -f "$state"
  fi
  local bin dir port loc
  bin="$(find_bin)"
  loc="$(pick_locale)"
  dir="$(mktemp -d -t marksync-pg.XXXXXX)"
  chmod 755 "$dir"
  mkdir -p "$dir/data" "$dir/run"
  if [[ "$(id -u)" -eq 0 ]]; then chown -R postgres: "$dir"; fi
  port="${PG_PORT:-$(free_port)}"
  as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --locale="$loc" -E UTF8 >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2; exit 1; }
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/run'
max_connections = 300
shared_buffers = 256MB
# Durable commits, as in production; fewer, longer checkpoints for write-heavy tests and benchmarks.
fsync = on
synchronous_commit = on
max_wal_size = 4GB
checkpoint_timeout = 15min
CONF
  cat >"$dir/data/pg_hba.conf" <<HBA
local all all trust
host  all all 127.0.0.1/32 trust
HBA
  # Record the cluster before starting it, so that `stop` can clean up after a failed start.
  mkdir -p "$(dirname "$state")"
  printf 'BIN=%q\nDIR=%q\nPORT=%q\nLOCALE=%q\n' "$bin" "$dir" "$port" "$loc" >"$state"
  # A port found free may still be taken before the server binds it: then
  # another free port, a few times, unless the caller named one.
  local tries=3
  until as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null; do
    tries=$(( tries - 1 ))
    if [[ -n "${PG_PORT:-}" || $tries -le 0 ]] || ! grep -q "could not bind\|could not create any TCP/IP sockets" "$dir/server.log"; then
      cat "$dir/server.log" >&2; exit 1
    fi
    port="$(free_port)"
    echo "pg.sh: port taken, trying $port" >&2
    as_pg sed -i "s/^port = .*/port = $port/" "$dir/data/postgresql.conf"
    printf 'BIN=%q\nDIR=%q\nPORT=%q\nLOCALE=%q\n' "$bin" "$dir" "$port" "$loc" >"$state"
  done
  as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAt \
    -c "CREATE DATABASE marksync" >/dev/null
  echo "pg.sh: PostgreSQL on 127.0.0.1:$port, locale $loc" >&2
}

cmd_stop() {
  if [[ ! -f "$state" ]]; then return 0; fi
  # shellcheck disable=SC1090
  source "$state"
  as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$DIR"
  rm -f "$state"
}

cmd_pause() {
  read_state
  as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
}

cmd_resume() {
  read_state
  as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start >/dev/null || {
    cat "$DIR/server.log" >&2; exit 1; }
}

cmd_url() {
  read_state
  echo "postgres://postgres@127.0.0.1:$PORT/marksync"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  url) cmd_url ;;
  pause) cmd_pause ;;
  resume) cmd_resume ;;
  *) echo "usage: scripts/pg.sh start|stop|url|pause|resume" >&2; exit 2 ;;
esac
