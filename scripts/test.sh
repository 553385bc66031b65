#!/usr/bin/env bash
# Sets up and runs every test: core (unit, property, simulation), server
# (SQLite and PostgreSQL over HTTP), Rust in headless Chromium, Firefox and WebKit, and the
# npm package end to end against the real server on both backends and in all three engines.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh all

scripts/pg.sh start
trap 'scripts/pg.sh stop' EXIT
export MARKSYNC_TEST_POSTGRES_URL="$(scripts/pg.sh url)"
# One build from scratch: incremental caches would only double what the disk holds.
export CARGO_INCREMENTAL=0

echo "== 1/4 core and server, native (unit, property, simulation, HTTP on SQLite and PostgreSQL)"
python3 scripts/import-cycles.py src server/src
cargo test --workspace --features marksync/sim

echo "== 2/4 the core builds for wasm32, and its browser tests pass in Chromium, Firefox and WebKit"
cargo build --target wasm32-unknown-unknown --lib
# The benchmarks' hidden exports build too (no timings here), so `make bench` cannot rot.
cargo build --target wasm32-unknown-unknown --lib --features bench-exports
wasm-pack test --headless --chrome --mode no-install --chromedriver "$(command -v chromedriver)" -- --test web --features testing
wasm-pack test --headless --firefox --mode no-install --geckodriver "$(command -v geckodriver)" -- --test web --features testing
# wasm-pack drives WebKit only as macOS's safaridriver; the same runner takes WebKitGTK's driver.
scripts/webkit.sh cargo test --target wasm32-unknown-unknown --test web --features testing

echo "== 3/4 build the npm package, the demo, the server and the app that embeds it"
scripts/build-www.sh
cargo build -p marksync-server --bins --example embed

echo "== 4/4 the npm package against the real server: Chromium on SQLite and PostgreSQL, Firefox and WebKit over WebDriver"
(cd www && npm test)
