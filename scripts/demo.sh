#!/usr/bin/env bash
# The demo: build the example plugins for wasm32-wasip2, drop them into a plugin directory,
# then host them and call their tools.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || echo "note: rustup not found; the wasm32-wasip2 target must be installed" >&2
cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml --target-dir plugins/target
dir=target/demo-plugins
rm -rf "$dir" && mkdir -p "$dir"
for plugin in greet counter notes calc text search; do
  cp "plugins/target/wasm32-wasip2/release/$plugin.wasm" "$dir/"
done
cargo run --release -q -p llm-worker --example demo -- "$dir"
