#!/usr/bin/env bash
# Sets up and runs the main job: the reference server on embedded SQLite,
# serving the demo app, at http://127.0.0.1:8787 (dev auth, loopback only).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh demo
scripts/build-www.sh
exec cargo run --release -p marksync-server -- --static www/dist --dev-auth "$@"
