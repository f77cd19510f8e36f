#!/usr/bin/env bash
# The official MCP conformance suite against `llm-worker serve --http` serving
# plugins/conformance (the suite's fixtures, written with the SDK) and the example plugins, for
# the requirement sets of both spec revisions, 2025-11-25 (stateful: initialize handshake) and
# 2026-07-28 (stateless: per-request _meta), each run at its own wire version. Prints
# passed/total per revision and the failing scenarios (docs/conformance.md). CI runs it.
#
# Exits non-zero when it cannot run the suite (a build, the install, the server or the suite
# itself failing), when a scenario a requirement set scores fails, or when a scenario of the
# tasks extension (which the host implements) fails but for the known ones below; other
# unscored scenarios (pending) are reported only.
#
# Needs Node >= 20.6 and npm (the npm registry, on first run). Output: target/conformance/
# (the suite's node_modules, and run/ with the server's log, the suite's logs and results).
set -euo pipefail
cd "$(dirname "$0")/.."

suite_version=0.2.0-alpha.12
revisions=(2025-11-25 2026-07-28)
prefix=target/conformance
run=$prefix/run
suite=$prefix/node_modules/@modelcontextprotocol/conformance/dist/index.js

fail() { echo "conformance: $*" >&2; exit 1; }

command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are needed"
node -e 'const [a, b] = process.versions.node.split(".").map(Number);
         process.exit(a > 20 || (a === 20 && b >= 6) ? 0 : 1)' \
    || fail "Node >= 20.6 is needed (module.register), not $(node --version)"

# The suite, pinned with every package below it by scripts/conformance/npm/package-lock.json
# (integrity hashes), in a local prefix (never globally), with `glob` for the Node 20 shim;
# no package's install scripts run. After a change of versions, update the lock with
# `npm install --package-lock-only` in scripts/conformance/npm.
lock=scripts/conformance/npm/package-lock.json
installed=$(node -p "try { require('./$prefix/node_modules/@modelcontextprotocol/conformance/package.json').version } catch { '' }")
if [ "$installed" != "$suite_version" ] || [ ! -d "$prefix/node_modules/glob" ] \
    || ! cmp -s "$lock" "$prefix/package-lock.json"; then
    echo "conformance: installing @modelcontextprotocol/conformance@$suite_version into $prefix (npm ci)"
    mkdir -p "$prefix"
    cp scripts/conformance/npm/package.json "$lock" "$prefix/"
    # The suite declares node >= 22 but runs on 20 with the shim below: the engine warning is
    # expected there and is not shown.
    npm ci --prefix "$prefix" --ignore-scripts --no-audit --no-fund --loglevel=error \
        || fail "npm could not install the suite"
    # npm ci leaves the lock as it was given: a later run compares it to see what is installed.
    cp "$lock" "$prefix/package-lock.json"
fi
# The suite's bundle imports `globSync` from `fs`, which Node 22 added: on Node 20 the import
# fails before anything runs. No Node 20 flag adds it, and a preload that assigns
# `fs.globSync` comes too late (a built-in ES module's export names are fixed when it is
# created). So node20-preload.mjs registers a resolve hook that gives ES-module importers of
# `fs` a module re-exporting `node:fs` plus a `globSync` built on the pinned npm `glob`; it
# does nothing on a Node that has `fs.globSync`. Unlike patching the installed bundle, this
# leaves the suite's files as npm installed them.
node_suite=(node --import ./scripts/conformance/node20-preload.mjs "$suite")
"${node_suite[@]}" --version >/dev/null || fail "the suite does not start on node $(node --version)"

# The example plugins and the host (debug, as the tests build it).
rustup toolchain install --no-self-update >/dev/null 2>&1 || echo "note: rustup could not install the toolchain of rust-toolchain.toml (Rust 1.97 with the wasm32-wasip2 target is needed)" >&2
cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml --target-dir plugins/target \
    || fail "the example plugins do not build"
cargo build -p llm-worker-cli || fail "llm-worker does not build"
cli="${CARGO_TARGET_DIR:-target}/debug/llm-worker"

rm -rf "$run" && mkdir -p "$run/plugins"
# The suite's fixtures (plugins/conformance, with its policy allowing the questions the suite
# asks), beside the example plugins.
for plugin in conformance greet counter notes calc text search; do
    cp "plugins/target/wasm32-wasip2/release/$plugin.wasm" "$run/plugins/"
done
cp plugins/conformance/conformance.policy.toml "$run/plugins/"

# The server, on a free loopback port, without a token (--no-auth, loopback only): the suite
# sends none. It prints its address once the plugins are loaded.
server_log=$run/server.log
"$cli" serve "$run/plugins" --http 127.0.0.1:0 --no-auth 2>"$server_log" &
server=$!
stop_server() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
}
trap stop_server EXIT
address=""
for _ in $(seq 1200); do
    address=$(sed -n 's|^llm-worker: serving MCP on http://\([^/]*\)/$|\1|p' "$server_log")
    [ -n "$address" ] && break
    kill -0 "$server" 2>/dev/null || { cat "$server_log" >&2; fail "the server exited"; }
    sleep 0.1
done
[ -n "$address" ] || { cat "$server_log" >&2; fail "the server did not start in 120 s"; }
# Under its loopback name, as a local client would use it (the dns-rebinding-protection
# scenario needs a localhost URL, and sends its host as Host and Origin).
url="http://localhost:${address##*:}/"
echo "conformance: llm-worker serves the fixtures and the example plugins at $url"

summary_args=()
for revision in "${revisions[@]}"; do
    log=$run/$revision.log
    results=$run/results-$revision
    echo "conformance: suite $suite_version, requirement set $revision (log: $log)"
    # Exit status 1 is failing scenarios, which this script reports without failing; whether
    # the suite ran at all is read from its summary (summary.mjs).
    "${node_suite[@]}" server --url "$url" --requirements "$revision" --output-dir "$results" \
        >"$log" 2>&1 || true
    summary_args+=("$revision" "$log" "$results")
done

echo
echo "MCP conformance suite $suite_version against llm-worker serve --http ($(date -u +%Y-%m-%d))"
status=0
# The tasks extension's scenarios are held to passing too (KNOWN_FAILING, space-separated
# names, would excuse some: none is).
KNOWN_FAILING="" node scripts/conformance/summary.mjs "${summary_args[@]}" || status=$?
case $status in
    0) ;;
    3) fail "a scored (or tasks) scenario failed (above); the suite's logs and checks are in $run" ;;
    *) fail "the suite did not complete a run: see the logs in $run" ;;
esac
