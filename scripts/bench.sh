#!/usr/bin/env bash
# Runs every benchmark — core (native), client (Chromium + IndexedDB + the
# real server), side by side with Loro, Yjs, Automerge, Dexie and raw
# IndexedDB, the server under load, its bytes on the wire and a victim under
# attack, the demo on a phone — then prints the summary and writes the
# generated part of BENCHMARKS.md. ~40 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh all

scripts/build-www.sh --pkg-only --bench-exports
cargo build --release -p marksync-server
cargo build --release --example merge_speed
mkdir -p bench/results

scripts/pg.sh start
trap 'scripts/pg.sh stop' EXIT
export MARKSYNC_TEST_POSTGRES_URL="$(scripts/pg.sh url)"
uptime > bench/results/load-before.txt

echo "== 1/7 core, native (criterion)"
cargo bench --bench core -- --noplot

echo "== 2/7 client: change(), drain + pull, cold open, wasm vs native merge, size"
node www/bench/client.mjs > bench/results/client.json

echo "== 3/7 side by side with the peers (Chromium)"
(cd bench && { [[ -d node_modules ]] && npm ls --depth=0 >/dev/null 2>&1 || npm ci --no-audit --no-fund; } && node run.mjs)

echo "== 4/7 server: batched vs per-op, SQLite and PostgreSQL, 1/8/64 users, hot user"
LOAD_JSON=bench/results/server.json cargo bench -p marksync-server --features bench-per-op --bench load

echo "== 5/7 server: bytes on the wire, plain and compressed (a 10k-op drain, a 100k-row backfill)"
node www/bench/wire.mjs > bench/results/wire.md

echo "== 6/7 server under attack: a victim's pull and push p99 alone and with each attacker"
cargo bench -p marksync-server --bench abuse | tee bench/results/abuse.txt

echo "== 7/7 the demo on a phone: Lighthouse (mobile, first visit, median of 3)"
scripts/build-www.sh
(cd bench/pwa && { [[ -d node_modules ]] && npm ls --depth=0 >/dev/null 2>&1 || npm ci --no-audit --no-fund; } && PWA_JSON=../results/pwa.json node run.mjs)

uptime > bench/results/load-after.txt
node bench/report.mjs
