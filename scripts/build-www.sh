#!/usr/bin/env bash
# Builds the npm package's wasm (www/pkg) and, unless --pkg-only, the demo app
# (www/dist). With --bench-exports it also builds www/pkg-bench: the same
# module plus the hidden exports the benchmarks use (never published).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

pkg_only=false
bench=false
for a in "$@"; do
  case "$a" in
    --pkg-only) pkg_only=true ;;
    --bench-exports) bench=true ;;
    *) echo "build-www: unknown option $a" >&2; exit 2 ;;
  esac
done

# The dependencies' sources are named from the registry's root, not from the
# builder's home: the shipped wasm names no path of the machine that built it
# (its panic locations keep the crate and file). Merged with the wasm target's
# flags of .cargo/config.toml, not in place of them.
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="${CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS:-} --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}/registry/src/="

# build <out dir> [cargo args…]
build() {
  local out="$1"; shift
  cargo build --profile wasm-release --target wasm32-unknown-unknown --lib "$@"
  wasm-bindgen --target web --out-dir "$out" target/wasm32-unknown-unknown/wasm-release/marksync.wasm
  # Binaryen from npm (pinned in www/package.json): Debian's older wasm-opt breaks externref tables.
  # `--converge` runs -Oz again until the module stops shrinking: ~1 KB gzip for ~10 s more.
  # `--flatten --rereloop` first rebuilds every function's control flow, which
  # -Oz then folds tighter: ~2.9 KB gzip for ~30 s more, at no cost to speed
  # measured side by side (BENCHMARKS.md, "The package, step by step").
  if [[ -x www/node_modules/.bin/wasm-opt ]]; then
    www/node_modules/.bin/wasm-opt --flatten --rereloop -Oz --converge --strip-debug --strip-producers "$out/marksync_bg.wasm" -o "$out/marksync_bg.wasm"
    # -Oz once more without the flattening: 0.6 KB gzip less for ~5 s.
    www/node_modules/.bin/wasm-opt -Oz "$out/marksync_bg.wasm" -o "$out/marksync_bg.wasm"
  else
    echo "build-www: run 'npm ci' in www first for wasm-opt; the wasm is not size-optimised" >&2
  fi
  # The glue minified, its snippets inlined (rolldown, pinned in
  # www/package.json; names of functions and classes kept): 12.2 → 6.7 KB gzip.
  if [[ -x www/node_modules/.bin/rolldown ]]; then
    www/node_modules/.bin/rolldown "$out/marksync.js" --minify --keepNames --format esm --logLevel silent --file "$out/marksync.min.js"
    mv "$out/marksync.min.js" "$out/marksync.js"
    rm -rf "$out/snippets"
  else
    echo "build-www: run 'npm ci' in www first for rolldown; the glue is not minified" >&2
  fi
  local raw gz
  raw=$(stat -c %s "$out/marksync_bg.wasm")
  gz=$(gzip -9 -c "$out/marksync_bg.wasm" | wc -c)
  echo "build-www: $out/marksync_bg.wasm ${raw} bytes raw, ${gz} bytes gzip"
}

if $bench; then
  build www/pkg-bench --features bench-exports
fi
build www/pkg

if ! $pkg_only && [[ -f www/demo/index.html ]]; then
  (cd www && npx vite build --config demo/vite.config.js)
fi
