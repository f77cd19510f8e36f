#!/usr/bin/env bash
# The tests: the plugins' own unit tests (natively), then the workspace's unit, compile-fail,
# doc and end-to-end tests (which build plugins/ for wasm32-wasip2 themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
# Without incremental state, unless asked for (CARGO_INCREMENTAL=1): building the workspace's
# own crates from nothing takes a quarter less CPU without it (BENCHMARKS.md, the first run),
# and both scripts must agree for the tests to reuse the demo's build.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The toolchain rust-toolchain.toml names (Rust 1.97, clippy, rustfmt, the wasm32-wasip2 target).
rustup toolchain install --no-self-update >/dev/null 2>&1 || echo "note: rustup could not install the toolchain of rust-toolchain.toml (Rust 1.97 with the wasm32-wasip2 target is needed)" >&2
# The registry tests (cli/tests/command/registry/) start Debian's `docker-registry`
# (distribution 2.8) on a loopback port, push with python3 and openssl as an independent
# client, and copy artifacts with Debian's `skopeo`; the metrics test
# (cli/tests/command/http/metrics.rs) has Debian's `prometheus` scrape
# the server. Install them where apt can; elsewhere those tests say they are skipped (under CI
# they fail instead).
# Four tests at a time in each test binary, not one per core: most of them wait (on servers
# and time limits), so with two threads on two cores a core sat idle. Measured warm
# (BENCHMARKS.md, the first run): end-to-end 36 s -> 26 s, MCP 25 s -> 17 s. The command's
# tests keep two at a time: they run beside the other tests' build, and some walk a plugin
# through work near its time limit (a directory of 100,000 entries within 10 s), which four at
# a time took past it.
command_threads="${RUST_TEST_THREADS:-2}"
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
logs=$(mktemp -d)
jobs=()
trap 'for job in "${jobs[@]}"; do kill "$job" 2>/dev/null || true; done; rm -rf "$logs"' EXIT
failed=""
missing=""
for program in docker-registry python3 openssl prometheus skopeo; do
    command -v "$program" >/dev/null 2>&1 || missing="$missing $program"
done
# Installed beside the build (it downloads and unpacks, the build computes), waited for before
# the command's tests, which use them, start; never stopped half-way (not one of `jobs`).
installing=""
if [ -n "$missing" ]; then
    packages="$missing"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing$packages in the background for the registry and metrics tests"
        # The packages' services are not wanted (the tests start their own registries and
        # Prometheus, on loopback; the packages' listen on every interface): kept from
        # starting while they install, and disabled after.
        (. scripts/quiet-install.sh && quiet_install $packages) >"$logs/apt" 2>&1 &
        installing=$!
    else
        echo "note:$missing not installed (apt-get install$packages as root); the registry tests will say they are skipped" >&2
    fi
fi

# The command's tests (cli/tests/command: child processes, servers and registries) need little
# beyond what the demo built: they are built first and run while the other tests build and
# run, their output shown after the others'.
command=""
if cargo test --workspace --test command --no-run 2>&1 | tee "$logs/build-command"; then
    if [ -n "$installing" ] && ! wait "$installing"; then
        echo "note: could not install$packages (below); the registry tests will say they are skipped" >&2
        cat "$logs/apt" >&2
    fi
    rm -f "$logs/apt"
    echo "running the command's tests in the background (cli/tests/command); their output follows the others'"
    RUST_TEST_THREADS="$command_threads" cargo test --workspace --no-fail-fast --test command >"$logs/command" 2>&1 &
    command=$!
    jobs+=("$command")
    # Until it runs them: the build below would otherwise hold the build directory first, and
    # the command's tests wait for all of it.
    while ! grep -q '^ *Running ' "$logs/command" 2>/dev/null && kill -0 "$command" 2>/dev/null; do
        sleep 0.2
    done
else
    failed="$failed build"
    if [ -n "$installing" ]; then
        wait "$installing" || true
    fi
fi

# Every other test of the workspace, built once.
cargo test --workspace --no-run 2>&1 | tee "$logs/build" || failed="$failed build"

# The plugins' own unit tests (natively, in their workspace and target directory) build and
# run once the workspace's build is done, beside its tests and at a lower priority; their
# output is shown when they are done. Not beside that build: two builds side by side on a
# two-core machine take longer than one after the other (BENCHMARKS.md, the first run). Only
# the plugins that have unit tests, and only their library's tests: building the others
# natively would test nothing (a fifth of the CPU time of their native build).
tested=()
for manifest in plugins/*/Cargo.toml plugins/fixtures/*/Cargo.toml; do
    if grep -rqsE '#\[(cfg\(test\)|test)\]' "$(dirname "$manifest")/src"; then
        tested+=(-p "$(sed -nE 's/^name *= *"([^"]+)".*/\1/p' "$manifest" | head -n 1)")
    fi
done
nice -n 10 cargo test --manifest-path plugins/Cargo.toml --target-dir plugins/target --lib --no-fail-fast "${tested[@]}" \
    >"$logs/plugins" 2>&1 &
plugins=$!
jobs+=("$plugins")

if [ -z "$failed" ]; then
    # The test targets the build above listed, but the command's.
    others=()
    for name in $(sed -nE 's#^ *Executable tests/([^/ ]+)(/main)?\.rs .*#\1#p' "$logs/build" | grep -vx command); do
        others+=(--test "$name")
    done
    if [ "${#others[@]}" -eq 0 ]; then
        echo "no test targets found in cargo's output (above)" >&2
        exit 1
    fi
    cargo test --workspace --no-fail-fast --lib --bins "${others[@]}" 2>&1 | tee "$logs/workspace" || failed="$failed workspace"
    cargo test --workspace --doc 2>&1 | tee "$logs/doc" || failed="$failed doc"
fi
if [ -n "$command" ]; then
    wait "$command" || failed="$failed command"
    cat "$logs/command"
fi
wait "$plugins" || failed="$failed plugins"
echo
echo "== the plugins' unit tests (plugins/)"
cat "$logs/plugins"

# One closing line for the whole run.
cat "$logs"/* | awk '/^test result:/ { p += $4; f += $6 } END { printf "all tests: %d passed, %d failed\n", p, f }'
if [ -n "$failed" ]; then
    echo "failed:$failed" >&2
    exit 1
fi
