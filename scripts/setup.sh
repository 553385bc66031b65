#!/usr/bin/env bash
# Installs what marksync needs, skipping what is already there.
#   scripts/setup.sh demo   # Rust, the wasm target, wasm-bindgen, npm packages
#   scripts/setup.sh all    # + Chromium and ChromeDriver, Firefox ESR and geckodriver, WebKitGTK
#                           #   with WebKitWebDriver and Xvfb, PostgreSQL,
#                           #   the en_US.UTF-8 locale, wasm-pack
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
what="${1:-all}"

sudo_() { if [[ "$(id -u)" -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

apt_pkgs=()
if [[ "$what" == all ]]; then
  command -v chromium >/dev/null 2>&1 || apt_pkgs+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || apt_pkgs+=(chromium-driver)
  command -v firefox-esr >/dev/null 2>&1 || apt_pkgs+=(firefox-esr)
  # WebKitGTK (Safari's engine): its WebDriver, which pulls MiniBrowser in, and a virtual display for it.
  command -v WebKitWebDriver >/dev/null 2>&1 || apt_pkgs+=(webkit2gtk-driver)
  command -v Xvfb >/dev/null 2>&1 || apt_pkgs+=(xvfb)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_pkgs+=(postgresql)
  command -v locale-gen >/dev/null 2>&1 || apt_pkgs+=(locales)
fi
command -v node >/dev/null 2>&1 || apt_pkgs+=(nodejs npm)
if [[ ${#apt_pkgs[@]} -gt 0 ]]; then
  echo "setup: apt-get install ${apt_pkgs[*]}"
  sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq "${apt_pkgs[@]}" >/dev/null
fi

rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

# The CLI must equal the wasm-bindgen crate in Cargo.lock exactly.
wb=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $wb"; then
  echo "setup: cargo install wasm-bindgen-cli $wb"
  cargo install wasm-bindgen-cli --version "$wb" --locked || cargo install wasm-bindgen-cli --version "$wb"
fi
# geckodriver drives Firefox for the Rust browser tests (Debian ships no package of it).
gecko_version="$(geckodriver --version 2>/dev/null || true)"
if [[ "$what" == all && "$gecko_version" != "geckodriver 0.37.1"* ]]; then
  echo "setup: cargo install geckodriver 0.37.1"
  cargo install geckodriver --version 0.37.1 --locked || cargo install geckodriver --version 0.37.1
fi
if [[ "$what" == all ]] && ! wasm-pack --version 2>/dev/null | grep -qx "wasm-pack 0.15.1"; then
  echo "setup: cargo install wasm-pack 0.15.1"
  cargo install wasm-pack --version 0.15.1 --locked || cargo install wasm-pack --version 0.15.1
fi

if [[ ! -d www/node_modules ]] || ! (cd www && npm ls --depth=0 >/dev/null 2>&1); then
  (cd www && npm ci --no-audit --no-fund)
fi
echo "setup: ready ($what)"
