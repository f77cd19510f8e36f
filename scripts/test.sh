#!/usr/bin/env bash
# The tests: the plugins' own unit tests (natively), then the workspace's unit, compile-fail,
# doc and end-to-end tests (which build plugins/ for wasm32-wasip2 themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
# The toolchain rust-toolchain.toml names (Rust 1.97, clippy, rustfmt, the wasm32-wasip2 target).
rustup toolchain install >/dev/null 2>&1 || echo "note: rustup could not install the toolchain of rust-toolchain.toml (Rust 1.97 with the wasm32-wasip2 target is needed)" >&2
# The registry tests (cli/tests/command/registry/) start Debian's `docker-registry`
# (distribution 2.8) on a loopback port, push with python3 and openssl as an independent
# client, and copy artifacts with Debian's `skopeo`; the metrics test
# (cli/tests/command/http/metrics.rs) has Debian's `prometheus` scrape
# the server. Install them where apt can; elsewhere those tests say they are skipped (under CI
# they fail instead).
missing=""
for program in docker-registry python3 openssl prometheus skopeo; do
    command -v "$program" >/dev/null 2>&1 || missing="$missing $program"
done
if [ -n "$missing" ]; then
    packages="$missing"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing$packages for the registry and metrics tests"
        # The package's service is not wanted: the tests start their own registries.
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages) >/dev/null \
            || echo "note: could not install$packages; the registry tests will say they are skipped" >&2
    else
        echo "note:$missing not installed (apt-get install$packages as root); the registry tests will say they are skipped" >&2
    fi
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --manifest-path plugins/Cargo.toml --target-dir plugins/target --workspace 2>&1 | tee -a "$log"
cargo test --workspace 2>&1 | tee -a "$log"
# One closing line for the whole run.
awk '/^test result:/ { p += $4; f += $6 } END { printf "all tests: %d passed, %d failed\n", p, f }' "$log"
