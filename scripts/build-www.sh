#!/usr/bin/env bash
# Builds the npm package's wasm (www/pkg) and, unless --pkg-only, the demo app (www/dist).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --profile wasm-release --target wasm32-unknown-unknown --lib
wasm-bindgen --target web --out-dir www/pkg target/wasm32-unknown-unknown/wasm-release/marksync.wasm
# Binaryen from npm (pinned in www/package.json): Debian's older wasm-opt breaks externref tables.
if [[ -x www/node_modules/.bin/wasm-opt ]]; then
  www/node_modules/.bin/wasm-opt -Oz --strip-debug --strip-producers \
    www/pkg/marksync_bg.wasm -o www/pkg/marksync_bg.wasm
else
  echo "build-www: run 'npm ci' in www first for wasm-opt; the wasm is not size-optimised" >&2
fi
raw=$(stat -c %s www/pkg/marksync_bg.wasm)
gz=$(gzip -9 -c www/pkg/marksync_bg.wasm | wc -c)
echo "build-www: marksync_bg.wasm ${raw} bytes raw, ${gz} bytes gzip"

if [[ "${1:-}" != "--pkg-only" && -f www/demo/index.html ]]; then
  (cd www && npx vite build --config demo/vite.config.js)
fi
