#!/usr/bin/env bash
# The demo: build the example plugins for wasm32-wasip2, drop them into a plugin directory,
# then use them through the `llm-worker` command and through the library (one session).
set -euo pipefail
cd "$(dirname "$0")/.."
# Without incremental state, unless asked for (CARGO_INCREMENTAL=1): building the workspace's
# own crates from nothing takes a quarter less CPU without it (BENCHMARKS.md, the first run),
# and both scripts must agree for the tests to reuse the demo's build.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The toolchain rust-toolchain.toml names (Rust 1.97, clippy, rustfmt, the wasm32-wasip2 target).
rustup toolchain install --no-self-update >/dev/null 2>&1 || echo "note: rustup could not install the toolchain of rust-toolchain.toml (Rust 1.97 with the wasm32-wasip2 target is needed)" >&2
# The plugins (release, wasm32-wasip2), then the host. One after the other: each build keeps
# both cores busy on its own, and on a two-core machine the two side by side took 40 s longer
# than one after the other (BENCHMARKS.md, the first run).
echo "building the example plugins (plugins/target/wasm32-wasip2/release)"
cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml --target-dir plugins/target
# The host in the dev profile, built as the tests build it (the whole workspace, examples
# included, so the same features): `./scripts/test.sh` afterwards reuses every crate of it,
# wasmtime first of all, instead of building it a second time in release. The dev profile
# optimises cranelift, wasmtime's compiler and the regex crates (Cargo.toml), so the demo runs
# at much the speed of a release build. For a release binary: `cargo build --release -p
# llm-worker-cli`.
echo "building the host (target/debug)"
cargo build --workspace --bins --examples
target="${CARGO_TARGET_DIR:-target}"
# The plugins are compiled into the cache the tests use (llm_worker_tests::cache_home), not
# ~/.cache, so that `./scripts/test.sh` afterwards finds them compiled: where the host would
# trust it, that is where the target directory and every directory above it are this user's
# or root's and writable by no one else (unless sticky, like /tmp).
case "$target" in /*) above="$target" ;; *) above="$PWD/$target" ;; esac
trusted=yes
d="$above"
while :; do
    read -r owner mode < <(stat -c '%u %a' "$d") || { trusted=no; break; }
    if { [ "$owner" != "$(id -u)" ] && [ "$owner" != 0 ]; } \
        || { (( 8#$mode & 8#022 )) && ! (( 8#$mode & 8#1000 )); }; then
        trusted=no
        break
    fi
    [ "$d" = / ] && break
    d=$(dirname "$d")
done
if [ "$trusted" = yes ]; then
    export XDG_CACHE_HOME="$above/tmp/llm-worker-cache-home"
fi
dir=target/demo-plugins
rm -rf "$dir" && mkdir -p "$dir"
for plugin in greet counter notes calc text search; do
  cp "plugins/target/wasm32-wasip2/release/$plugin.wasm" "$dir/"
done
cli="$target/debug/llm-worker"
show() { printf '\n$ %s\n' "$*"; "$@" || true; }

show "$cli" check "$dir"
show "$cli" list "$dir"
printf '\n$ %s\n' "$cli schema $dir --format anthropic | head -n 24"
"$cli" schema "$dir" --format anthropic | head -n 24
show "$cli" call "$dir" greet '{"name":"Ada"}'
show "$cli" call "$dir" search '{"query":"wasi","limit":1}'
show "$cli" call "$dir" divide '{"dividend":1,"divisor":0}'
show "$cli" call "$dir" join '{"words":["a",2]}'

printf '\n$ %s %s   # one session through the library: state is kept\n' "$target/debug/examples/demo" "$dir"
"$target/debug/examples/demo" "$dir"

# The MCP reference servers' tools as sandboxed plugins, each with its policy file beside it
# (plugins/NAME/NAME.policy.toml): each reaches only what its policy grants.
ref=target/demo-reference
rm -rf "$ref" && mkdir -p "$ref/plugins" "$ref/memory-data" "$ref/filesystem-data"
for plugin in time fetch memory filesystem; do
  cp "plugins/target/wasm32-wasip2/release/$plugin.wasm" "plugins/$plugin/$plugin.policy.toml" "$ref/plugins/"
done
echo "Hello from inside the grant." > "$ref/filesystem-data/hello.txt"
printf '\n# The reference tools, sandboxed (%s)\n' "$ref/plugins"
show "$cli" call "$ref/plugins" convert_time '{"source_timezone":"America/New_York","time":"16:30","target_timezone":"Asia/Tokyo"}'
show "$cli" call "$ref/plugins" read_text_file '{"path":"/data/hello.txt"}'
show "$cli" call "$ref/plugins" read_text_file '{"path":"/data/../../../etc/passwd"}'
show "$cli" call "$ref/plugins" create_entities '{"entities":[{"name":"Ada","entityType":"person","observations":["wrote the first program"]}]}'
show "$cli" call "$ref/plugins" search_nodes '{"query":"program"}'
show "$cli" call "$ref/plugins" fetch '{"url":"http://169.254.169.254/latest/meta-data/"}'
