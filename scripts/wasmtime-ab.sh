#!/usr/bin/env bash
# A/B of two wasmtime versions, bare (no llm-worker code): builds scripts/wasmtime-ab once per
# version with the same toolchain and features as the host, then runs the two in turn, RUNS
# times each, on the echo fixture. Each run prints the median of 21 samples of 20,000 warm
# calls, and the p50/p90 of 2,000 calls made after 250 µs idle each.
#
#   scripts/wasmtime-ab.sh [OLD [NEW]]      # default: 48.0.8 50.0.1; RUNS=6, NOASLR=1 to disable ASLR
#
# Process runs land in one of two speeds by address layout (ASLR): compare many runs, or set
# NOASLR=1 (setarch -R), as BENCHMARKS.md says.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:-48.0.8}
new=${2:-50.0.1}
runs=${RUNS:-6}
cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml --target-dir plugins/target -p echo
echo_wasm=plugins/target/wasm32-wasip2/release/echo.wasm
build() {
    local version=$1 dir=target/wasmtime-ab/$1
    mkdir -p "$dir"
    sed "s/=50.0.1/=$version/g" scripts/wasmtime-ab/Cargo.toml > "$dir/Cargo.toml"
    rm -rf "$dir/src" && cp -r scripts/wasmtime-ab/src "$dir/src"
    sed -i "s|\"../../wit/0.3.0\"|\"$PWD/wit/0.3.0\"|" "$dir/src/main.rs"
    cp rust-toolchain.toml "$dir/"
    (cd "$dir" && CARGO_TARGET_DIR=target cargo build --release --quiet)
}
build "$old"
build "$new"
wrap=()
[ "${NOASLR:-0}" = 1 ] && wrap=(setarch -R)
for _ in $(seq "$runs"); do
    for version in "$old" "$new"; do
        echo -n "wasmtime $version: "
        "${wrap[@]}" "target/wasmtime-ab/$version/target/release/wasmtime-ab" "$echo_wasm" | sed 's/^wasmtime-ab //'
    done
done
