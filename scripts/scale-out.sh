#!/usr/bin/env bash
# Opt-in check of docs/deploy.md (not part of the test command): two `llm-worker serve --http`
# replicas behind nginx on loopback, sessions driven through nginx; every session must keep
# its own state on its own replica, and every task started through nginx (by a stateless
# 2026-07-28 client) must be answered by `tasks/get` through nginx, on the replica that runs it.
#
#   ./scripts/scale-out.sh            # installs nginx with apt-get if it is missing
#
# Needs: rustup's stable Rust, curl, and nginx (Debian: `apt-get install nginx-light`).
set -euo pipefail
cd "$(dirname "$0")/.."
rustup toolchain install --no-self-update >/dev/null 2>&1 || true
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    echo "== installing nginx"
    # Its default site (port 80 on every interface) is not wanted: kept from starting.
    . scripts/quiet-install.sh
    quiet_install nginx-light >/dev/null || quiet_install nginx >/dev/null
fi
nginx=$(command -v nginx || echo /usr/sbin/nginx)

cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml \
    --target-dir plugins/target -q
cargo build --release -p llm-worker-cli -q
cli="${CARGO_TARGET_DIR:-target}/release/llm-worker"
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/plugins"
cp plugins/target/wasm32-wasip2/release/counter.wasm "$work/plugins/"
# The conformance fixtures: `slow_compute` may run as a task.
cp plugins/target/wasm32-wasip2/release/conformance.wasm plugins/conformance/conformance.policy.toml \
    "$work/plugins/"
printf 'scale-out-check-token\n' > "$work/tokens"
chmod 600 "$work/tokens"

# Two replicas, each with its own session prefix.
for replica in 1 2; do
    port=$((18090 + replica))
    "$cli" serve "$work/plugins" --http "127.0.0.1:$port" \
        --session-prefix "r$replica-" --token-file "$work/tokens" -q \
        2> "$work/replica$replica.log" &
    pids+=($!)
done

# nginx: a new session (no Mcp-Session-Id) goes to either replica; every later request goes
# to the replica whose prefix its session id carries.
cat > "$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events {}
http {
    access_log off;
    client_body_temp_path $work/body;
    proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi;
    scgi_temp_path $work/scgi;
    upstream llm_worker_any { server 127.0.0.1:18091; server 127.0.0.1:18092; }
    upstream llm_worker_r1 { server 127.0.0.1:18091; }
    upstream llm_worker_r2 { server 127.0.0.1:18092; }
    # The session id's prefix; for a stateless \`tasks/*\` request (no session), the task
    # id's, which \`Mcp-Name\` carries.
    map "\$http_mcp_session_id:\$http_mcp_name" \$llm_worker_replica {
        ~^r1- llm_worker_r1;
        ~^r2- llm_worker_r2;
        ~^:r1-task- llm_worker_r1;
        ~^:r2-task- llm_worker_r2;
        default llm_worker_any;
    }
    server {
        listen 127.0.0.1:18090;
        location / {
            proxy_pass http://\$llm_worker_replica;
            proxy_http_version 1.1;
            proxy_set_header Host 127.0.0.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 1h;
        }
    }
}
CONF
"$nginx" -c "$work/nginx.conf" -p "$work"
for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:18091/" 2>/dev/null && \
        curl -s -o /dev/null "http://127.0.0.1:18092/" 2>/dev/null && break
    sleep 0.1
done

url=http://127.0.0.1:18090/
headers=(-H "Authorization: Bearer scale-out-check-token" -H "Content-Type: application/json"
         -H "Accept: application/json, text/event-stream")
# Opens a session through nginx; prints its id.
open_session() {
    local id
    id=$(curl -s -D - -o /dev/null "${headers[@]}" "$url" -d \
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"scale-out","version":"1"}}}' \
        | tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id" {print $2}')
    curl -s -o /dev/null "${headers[@]}" -H "Mcp-Session-Id: $id" -H "MCP-Protocol-Version: 2025-06-18" \
        "$url" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
    echo "$id"
}
# Calls `count` in session $1; prints the count.
count() {
    curl -s "${headers[@]}" -H "Mcp-Session-Id: $1" -H "MCP-Protocol-Version: 2025-06-18" "$url" \
        -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"count","arguments":{}}}' \
        | sed -n 's/.*"text":"\([0-9]*\)".*/\1/p' | head -n 1
}

sessions=()
for _ in 1 2 3 4 5 6; do sessions+=("$(open_session)"); done
replicas=$(printf '%s\n' "${sessions[@]}" | cut -c1-3 | sort -u | tr '\n' ' ')
echo "== sessions: ${sessions[*]}"
echo "== replicas used: $replicas"
failed=0
for round in 0 1 2; do
    for session in "${sessions[@]}"; do
        got=$(count "$session")
        if [ "$got" != "$round" ]; then
            echo "FAIL: session $session counted '$got', expected $round"
            failed=1
        fi
    done
done
if [ "$(echo "$replicas" | wc -w)" -lt 2 ]; then
    echo "FAIL: all sessions landed on one replica ($replicas)"
    failed=1
fi
if [ "$failed" = 0 ]; then
    echo "ok: ${#sessions[@]} sessions over 2 replicas, each kept its own count (0, 1, 2)"
fi

# Tasks, stateless (protocol 2026-07-28: no session; every request says who it is in `_meta`
# and names its target in `Mcp-Name`): a call started through nginx lands on either replica,
# which answers with a task whose id carries its prefix; `tasks/get` through nginx is routed on
# that prefix to the replica that runs it.
meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"scale-out","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
stateless() { # method, name, params (without `_meta`)
    curl -s "${headers[@]}" -H "MCP-Protocol-Version: 2026-07-28" -H "Mcp-Method: $1" \
        -H "Mcp-Name: $2" "$url" \
        -d "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"$1\",\"params\":{$3,$meta}}"
}
tasks=()
for i in 1 2 3 4 5 6; do
    answer=$(stateless tools/call slow_compute \
        "\"name\":\"slow_compute\",\"arguments\":{\"seconds\":1,\"label\":\"job $i\"}")
    id=$(printf '%s' "$answer" | sed -n 's/.*"taskId":"\([^"]*\)".*/\1/p' | head -n 1)
    if [ -z "$id" ]; then
        echo "FAIL: call $i was not answered with a task: $answer"
        failed=1
        continue
    fi
    tasks+=("$id")
done
task_replicas=$(printf '%s\n' "${tasks[@]}" | cut -c1-3 | sort -u | tr '\n' ' ')
echo "== tasks: ${tasks[*]}"
echo "== replicas running them: $task_replicas"
for i in "${!tasks[@]}"; do
    id=${tasks[$i]}
    status=""
    for _ in $(seq 1 100); do
        answer=$(stateless tasks/get "$id" "\"taskId\":\"$id\"")
        status=$(printf '%s' "$answer" | sed -n 's/.*"status":"\([a-z_]*\)".*/\1/p' | head -n 1)
        [ "$status" = working ] || break
        sleep 0.1
    done
    if [ "$status" != completed ] || ! printf '%s' "$answer" | grep -q "Computed job $((i + 1)) after 1 seconds"; then
        echo "FAIL: task $id through nginx: $answer"
        failed=1
    fi
done
if [ "$(echo "$task_replicas" | wc -w)" -lt 2 ]; then
    echo "FAIL: all tasks ran on one replica ($task_replicas)"
    failed=1
fi
if [ "$failed" = 0 ]; then
    echo "ok: ${#tasks[@]} tasks over 2 replicas, each answered through nginx with its own result"
fi
exit "$failed"
