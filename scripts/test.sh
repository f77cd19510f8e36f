#!/usr/bin/env bash
# The tests: the plugins' own unit tests (natively), then the workspace's unit, compile-fail,
# doc and end-to-end tests (which build plugins/ for wasm32-wasip2 themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || echo "note: rustup not found; the wasm32-wasip2 target must be installed" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --manifest-path plugins/Cargo.toml --target-dir plugins/target --workspace 2>&1 | tee -a "$log"
cargo test --workspace 2>&1 | tee -a "$log"
# One closing line for the whole run.
awk '/^test result:/ { p += $4; f += $6 } END { printf "all tests: %d passed, %d failed\n", p, f }' "$log"
