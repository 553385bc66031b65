#!/usr/bin/env bash
# Runs a command with WebKitGTK (Safari's engine) behind a W3C WebDriver:
# a virtual X display (MiniBrowser has no headless mode), WebKitWebDriver on
# a free port, and SAFARIDRIVER_REMOTE pointing at it — the variable through
# which wasm-bindgen's test runner takes a remote WebKit driver.
#   scripts/webkit.sh cargo test --target wasm32-unknown-unknown --test web
set -euo pipefail

xfd="$(mktemp)"
Xvfb -displayfd 3 -screen 0 1280x1024x24 -nolisten tcp 3>"$xfd" 2>/dev/null &
xvfb=$!
driver=
cleanup() {
  [[ -n "$driver" ]] && kill "$driver" 2>/dev/null || true
  kill "$xvfb" 2>/dev/null || true
  rm -f "$xfd"
}
trap cleanup EXIT
for _ in $(seq 100); do [[ -s "$xfd" ]] && break; sleep 0.1; done
display=":$(head -n1 "$xfd")"

port="$(node -e "const s=require('net').createServer();s.listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")"
DISPLAY="$display" WebKitWebDriver --port="$port" >/dev/null 2>&1 &
driver=$!
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

export SAFARIDRIVER_REMOTE="http://127.0.0.1:$port"
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
"$@"
