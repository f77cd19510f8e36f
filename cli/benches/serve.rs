//! What serving costs: `tools/call` throughput over streamable HTTP with 1, 10 and 100
//! concurrent sessions against a trivial rmcp server with the same tool (the floor), the
//! latency of sequential calls over stdio against the same floor served over stdio, the cost
//! of opening a session, resident memory per open session, what requests in progress take
//! against what the server counts for them, and the start of the command.
//!
//! ```sh
//! cargo bench -p llm-worker-cli --bench serve [-- SECTION…]   # throughput, stdio, open, memory, requests, start
//! ```
//!
//! Prints Markdown tables; every ratio is between setups measured in this one run.
// The server's futures (wasmtime's concurrent calls inside rmcp's handlers) nest deeper
// than the default limit of 128 lets the compiler lay them out.
#![recursion_limit = "256"]

#[path = "../../host/benches/common/smaps.rs"]
mod smaps;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use llm_worker::PluginHost;
use llm_worker::mcp::{HttpOptions, McpOptions, ToolCatalog};
use llm_worker_tests::bench::{median, percentile, ratio, show};
use llm_worker_tests::{plugin_path, scratch_dir};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

/// The floor: an rmcp server with one `echo` tool and nothing else.
#[derive(Clone)]
struct Floor;

impl ServerHandler for Floor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let schema = schema.as_object().cloned().unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo",
            "Echoes",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = serde_json::Value::Object(request.arguments.unwrap_or_default()).to_string();
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// Serves the floor on a new loopback port; returns its URL.
async fn floor_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    let service = StreamableHttpService::new(
        || Ok(Floor),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let service = service.clone();
            tokio::spawn(async move {
                let handler = hyper::service::service_fn(move |request| {
                    let service = service.clone();
                    async move { Ok::<_, std::convert::Infallible>(service.handle(request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), handler)
                    .await;
            });
        }
    });
    url
}

/// When set, this benchmark's own executable is a server over stdio (the stdio section starts
/// it as a child process): `floor` the bare rmcp server, `native` llm-worker's MCP layer
/// serving a native echo tool (no plugin: what the layer costs apart from the sandbox).
const STDIO_SERVER: &str = "LLM_WORKER_BENCH_STDIO_SERVER";

/// The floor's echo as a native [`llm_worker::Tool`]: the arguments back as text.
struct NativeEcho;

#[async_trait::async_trait]
impl llm_worker::Tool for NativeEcho {
    async fn execute(&self, input_json: &str) -> Result<String, llm_worker::ToolError> {
        Ok(input_json.to_owned())
    }
}

/// Serves `which` (see [`STDIO_SERVER`]) on this process's stdin and stdout until the client
/// goes.
fn serve_on_stdio(which: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        if which == "native" {
            llm_worker::mcp::serve_stdio(
                ToolCatalog::new([native_group()]),
                McpOptions::new("bench", "0"),
            )
            .await
            .expect("serve the native echo over stdio");
        } else if which == "floor-reactor" {
            // The floor again, its stdin and stdout (pipes) read and written through Tokio's
            // reactor as `mcp::serve_stdio` does, rather than on its blocking pool as
            // `rmcp::transport::stdio` does: the floor of the same transport.
            use std::os::fd::AsFd;
            use tokio::net::unix::pipe;
            let input = std::io::stdin().as_fd().try_clone_to_owned().expect("dup");
            let output = std::io::stdout().as_fd().try_clone_to_owned().expect("dup");
            let transport = (
                pipe::Receiver::from_owned_fd(input).expect("stdin is a pipe"),
                pipe::Sender::from_owned_fd(output).expect("stdout is a pipe"),
            );
            let running = Floor
                .serve(transport)
                .await
                .expect("serve the floor over stdio");
            let _ = running.waiting().await;
        } else {
            let running = Floor
                .serve(rmcp::transport::stdio())
                .await
                .expect("serve the floor over stdio");
            let _ = running.waiting().await;
        }
    });
}

/// Serves `plugins` with llm-worker's library on a new loopback port; returns its URL.
async fn llm_worker_server(plugins: &[&str]) -> String {
    let paths: Vec<_> = plugins.iter().map(|name| plugin_path(name)).collect();
    llm_worker_server_of(&paths).await
}

/// The native echo as a tool group of its own (what the layer costs apart from the sandbox).
fn native_group() -> llm_worker::mcp::ToolGroup {
    llm_worker::mcp::ToolGroup::new("native", 1, || {
        let definition: llm_worker::ToolDefinition = Arc::new(|| {
            let meta = llm_worker::ToolMeta::new("echo")
                .description("Echoes")
                .input_schema(json!({"type": "object"}));
            (meta, Arc::new(NativeEcho) as Arc<dyn llm_worker::Tool>)
        });
        vec![definition]
    })
}

/// Serves the plugins at `paths` with llm-worker's library on a new loopback port (the native
/// echo if `paths` is empty); returns its URL.
async fn llm_worker_server_of(paths: &[std::path::PathBuf]) -> String {
    let host = PluginHost::new().expect("host");
    let loaded: Vec<_> = paths
        .iter()
        .map(|path| host.load(path).expect("load"))
        .collect();
    let catalog = if loaded.is_empty() {
        ToolCatalog::new([native_group()])
    } else {
        ToolCatalog::from_plugins(&loaded)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    tokio::spawn(llm_worker::mcp::serve_http(
        listener,
        catalog,
        McpOptions::new("bench", "1"),
        HttpOptions::default().no_auth(true).max_sessions(10_000),
    ));
    url
}

async fn connect(url: &str) -> RunningService<RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_uri(url))
        .await
        .expect("initialize")
}

fn echo_call() -> CallToolRequestParams {
    let arguments = json!({"text": "hello"});
    CallToolRequestParams::new("echo")
        .with_arguments(arguments.as_object().cloned().unwrap_or_default())
}

/// Calls per second of `sessions` sessions calling `echo` as fast as they can for `window`.
async fn throughput(url: &str, sessions: usize, window: Duration) -> f64 {
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        clients.push(Arc::new(connect(url).await));
    }
    for client in &clients {
        client.call_tool(echo_call()).await.expect("warm-up call");
    }
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + window;
    let tasks: Vec<_> = clients
        .iter()
        .map(|client| {
            let (client, done) = (Arc::clone(client), Arc::clone(&done));
            tokio::spawn(async move {
                while Instant::now() < until {
                    if client.call_tool(echo_call()).await.is_ok() {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    let calls = done.load(Ordering::Relaxed) as f64;
    for client in clients {
        if let Ok(client) = Arc::try_unwrap(client) {
            let _ = client.cancel().await;
        }
    }
    calls / window.as_secs_f64()
}

fn section_throughput(runtime: &tokio::runtime::Runtime) {
    // The floor first; then llm-worker serving the SDK's echo (contract 1.0.0), the same tool
    // built for contract 0.3.0 (one call at a time, no event loop per instance), and the
    // native echo (the layer without a sandbox).
    let servers = runtime.block_on(async {
        [
            floor_server().await,
            llm_worker_server(&["echo"]).await,
            llm_worker_server_of(&[llm_worker_tests::plugin_v03_path("echo")]).await,
            llm_worker_server_of(&[]).await,
        ]
    });
    println!(
        "\n| tools/call over HTTP, concurrent sessions | rmcp floor (calls/s) | llm-worker, echo plugin 1.0.0 | echo plugin 0.3.0 | native echo `Tool` |"
    );
    println!("|---|---|---|---|---|");
    for sessions in [1, 10, 100] {
        let window = Duration::from_secs(3);
        // Take turns, twice, and keep each one's better run (the machine is shared).
        let mut best = [0.0f64; 4];
        for _ in 0..2 {
            for (url, best) in servers.iter().zip(best.iter_mut()) {
                *best = best.max(runtime.block_on(throughput(url, sessions, window)));
            }
        }
        let cells: Vec<String> = best[1..]
            .iter()
            .map(|rate| format!("{rate:.0} ({:.2}×)", rate / best[0]))
            .collect();
        println!("| {sessions} | {:.0} | {} |", best[0], cells.join(" | "));
    }
}

/// Latencies of `rounds × per_round` sequential `echo` calls over stdio to each of `servers`
/// (child processes), the servers taking turns every `per_round` calls (the machine's noise is
/// of the size being measured, so none gets a quieter minute than the others).
async fn stdio_latencies(
    servers: &[RunningService<RoleClient, ()>],
    rounds: usize,
    per_round: usize,
) -> Vec<Vec<Duration>> {
    let mut times = vec![Vec::new(); servers.len()];
    for _ in 0..rounds {
        for (client, into) in servers.iter().zip(times.iter_mut()) {
            for _ in 0..per_round {
                let start = Instant::now();
                client
                    .call_tool(echo_call())
                    .await
                    .expect("echo over stdio");
                into.push(start.elapsed());
            }
        }
    }
    times
}

fn section_stdio(runtime: &tokio::runtime::Runtime) {
    use rmcp::transport::TokioChildProcess;
    let root = scratch_dir("bench-stdio");
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(plugin_path("echo"), dir.join("echo.wasm")).expect("copy");
    let dir_v03 = root.join("plugins-0.3");
    std::fs::create_dir(&dir_v03).expect("mkdir");
    std::fs::copy(
        llm_worker_tests::plugin_v03_path("echo"),
        dir_v03.join("echo.wasm"),
    )
    .expect("copy");
    let mut ours_v03 = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    ours_v03
        .args(["-q", "serve", "--cache-dir"])
        .arg(root.join("cache"))
        .arg(&dir_v03);
    let mut ours = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    ours.args(["-q", "serve", "--cache-dir"])
        .arg(root.join("cache"))
        .arg(&dir);
    let mut pooled = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    pooled
        .args(["-q", "serve", "--pool", "4", "--cache-dir"])
        .arg(root.join("cache"))
        .arg(&dir);
    let own = std::env::current_exe().expect("own path");
    let mut native = tokio::process::Command::new(&own);
    native.env(STDIO_SERVER, "native");
    let mut floor = tokio::process::Command::new(&own);
    floor.env(STDIO_SERVER, "floor");
    let mut floor_reactor = tokio::process::Command::new(&own);
    floor_reactor.env(STDIO_SERVER, "floor-reactor");
    let mut times = runtime.block_on(async {
        let mut servers = Vec::new();
        for (command, what) in [
            (floor, "the floor"),
            (floor_reactor, "the floor over the reactor"),
            (native, "the native echo"),
            (ours, "llm-worker serve"),
            (pooled, "llm-worker serve --pool 4"),
            (ours_v03, "llm-worker serve, contract 0.3.0"),
        ] {
            let transport =
                TokioChildProcess::new(command).unwrap_or_else(|e| panic!("spawn {what}: {e}"));
            servers.push(
                ().serve(transport)
                    .await
                    .unwrap_or_else(|e| panic!("initialize {what}: {e}")),
            );
        }
        // Warm-up: the plugin's instance, the cache, every process's allocator.
        let _ = stdio_latencies(&servers, 1, 200).await;
        let times = stdio_latencies(&servers, 10, 200).await;
        for server in servers {
            let _ = server.cancel().await;
        }
        times
    });
    println!(
        "\n| 2,000 sequential tools/call over stdio (rmcp client, child processes, taking turns every 200) | p50 | p90 | p50 vs floor | p50 vs floor, same transport |"
    );
    println!("|---|---|---|---|---|");
    let floor50 = percentile(&mut times[0], 0.5);
    let names = [
        "rmcp floor (`rmcp::transport::stdio`)",
        "rmcp floor, stdin and stdout through Tokio's reactor (as `mcp::serve_stdio` reads them)",
        "llm-worker's MCP layer, native echo `Tool` (`mcp::serve_stdio`)",
        "`llm-worker serve`, echo plugin",
        "`llm-worker serve --pool 4` (wasmtime's pooling allocator), echo plugin",
        "`llm-worker serve`, the echo plugin built for contract 0.3.0",
    ];
    let reactor50 = percentile(&mut times[1], 0.5);
    for (index, (name, times)) in names.iter().zip(times.iter_mut()).enumerate() {
        let (p50, p90) = (percentile(times, 0.5), percentile(times, 0.9));
        // The first floor speaks another transport than the rest.
        let same = match index {
            0 => "".to_owned(),
            _ => ratio(p50, reactor50),
        };
        println!(
            "| {name} | {} | {} | {} | {same} |",
            show(p50),
            show(p90),
            ratio(p50, floor50)
        );
    }
}

fn section_open(runtime: &tokio::runtime::Runtime) {
    let (ours, six, floor) = runtime.block_on(async {
        (
            llm_worker_server(&["echo"]).await,
            llm_worker_server(&["greet", "counter", "notes", "calc", "text", "search"]).await,
            floor_server().await,
        )
    });
    let open = |url: &str| {
        median(3, |n| {
            runtime.block_on(async {
                for _ in 0..n {
                    let client = connect(url).await;
                    let _ = client.cancel().await;
                }
            });
        })
    };
    let (floor_open, ours_open, six_open) = (open(&floor), open(&ours), open(&six));
    println!(
        "\n| opening a session (initialize … close, as a client sees it) | median | vs floor |"
    );
    println!("|---|---|---|");
    println!("| rmcp floor | {} | 1.00× |", show(floor_open));
    println!(
        "| llm-worker, echo plugin | {} | {} |",
        show(ours_open),
        ratio(ours_open, floor_open)
    );
    println!(
        "| llm-worker, the six example plugins | {} | {} |",
        show(six_open),
        ratio(six_open, floor_open)
    );
}

/// The resident memory of process `pid`, in bytes.
fn resident(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Sessions opened to measure memory. Enough that what the server freed before (compiling the
/// plugins, the first session) is used up: with 100, the same build measured 3% less.
const SESSIONS: usize = 500;

/// `llm-worker serve --http` on a loopback port for the plugins of `dir` (its cache in
/// `root`), with `flags`: the process, its id and the URL it serves on.
async fn spawn_serve(
    root: &std::path::Path,
    dir: &std::path::Path,
    flags: &[&str],
) -> (tokio::process::Child, u32, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
        .args(["serve", "--http", "127.0.0.1:0", "-q", "--cache-dir"])
        .arg(root.join("cache"))
        .args(flags)
        .arg(dir)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn llm-worker serve");
    let pid = child.id().expect("pid");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut url = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(found) = line.strip_prefix("llm-worker: serving MCP on ") {
            url = found.to_owned();
            break;
        }
    }
    (child, pid, url)
}

fn section_memory(runtime: &tokio::runtime::Runtime) {
    let root = scratch_dir("bench-memory");
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    for name in ["greet", "counter", "notes", "calc", "text", "search"] {
        std::fs::copy(plugin_path(name), dir.join(format!("{name}.wasm"))).expect("copy");
    }
    runtime.block_on(async {
        let (mut child, pid, url) =
            spawn_serve(&root, &dir, &["--no-auth", "--max-sessions", "1000"]).await;
        // One session first, so that what every session shares is counted before.
        let first = connect(&url).await;
        first.call_tool(CallToolRequestParams::new("count")).await.expect("count");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = resident(pid);
        let mapped_before = smaps::resident_by_mapping(&pid.to_string());
        let mut sessions = Vec::new();
        for _ in 0..SESSIONS {
            let client = connect(&url).await;
            client.call_tool(CallToolRequestParams::new("count")).await.expect("count");
            sessions.push(client);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = resident(pid);
        let mapped_after = smaps::resident_by_mapping(&pid.to_string());
        println!(
            "\n| memory of `llm-worker serve --http`, six example plugins | resident per open session |{}",
            smaps::header()
        );
        println!("|---|---|{}", "---|".repeat(smaps::MAPPINGS.len()));
        match (before, after, mapped_before, mapped_after) {
            (Some(before), Some(after), Some(mapped_before), Some(mapped_after)) => println!(
                "| {SESSIONS} sessions, each after one call of `count` (six instances started, one plugin initialised) | {:.1} KiB |{}",
                after.saturating_sub(before) as f64 / SESSIONS as f64 / 1024.0,
                smaps::cells(&smaps::added_per(&mapped_before, &mapped_after, SESSIONS as f64))
            ),
            _ => println!("| (no /proc here) | – |"),
        }
        for client in sessions {
            let _ = client.cancel().await;
        }
        let _ = first.cancel().await;
        let _ = child.kill().await;
    });
}

/// `llm-worker list` on 50 plugin files with a warm cache, as a process.
fn section_start() {
    let dir = scratch_dir("bench-50");
    let plugins = dir.join("plugins");
    std::fs::create_dir(&plugins).expect("mkdir");
    for i in 0..50 {
        std::fs::copy(
            plugin_path("echo"),
            plugins.join(format!("echo{i:02}.wasm")),
        )
        .expect("copy");
    }
    let run = || {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
            .args(["-q", "list", "--cache-dir"])
            .arg(dir.join("cache"))
            .arg(&plugins)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run llm-worker");
        std::hint::black_box(status);
    };
    run(); // fills the cache
    let start = median(5, |n| {
        for _ in 0..n {
            run();
        }
    });
    println!("\n| start | median |");
    println!("|---|---|");
    println!(
        "| `llm-worker list` on 50 plugin files, warm cache (copies of one plugin) | {} |",
        show(start)
    );
}

/// The server's memory for requests in the `requests` section, in MiB (no identities: one
/// client may hold all of it).
const REQUEST_MEMORY_MIB: usize = 256;

/// Sessions the `requests` section opens: one for each call it may send.
const SESSIONS_FOR_REQUESTS: usize = 400;

/// One HTTP/1.1 POST of `body` to the server at `address` (`host:port`), in `session`, on a
/// connection of its own that closes after the answer: the status, the answer's head and the
/// connection, its body unread.
async fn post_raw(
    address: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, String, tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let session = session.map_or_else(String::new, |id| format!("mcp-session-id: {id}\r\n"));
    let head = format!(
        "POST / HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\naccept: \
         application/json, text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\
         {session}\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(body.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).await.expect("an answer");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or(0);
    (status, head, stream)
}

/// Reads what is left of an answer, to its end.
async fn drain(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
}

/// What requests in progress take in the server's memory, against what its budget for them
/// counts: for each shape of body (sent in a call's `_meta`, which rmcp keeps parsed for the
/// request's life, as the call waits), a server of its own admits as many calls as its budget
/// allows (256 MiB, one client); what it counted per request is the budget over the calls it
/// admitted, what they took the growth of its resident memory over them. Counted at least
/// what they took means the budget errs high.
fn section_requests(runtime: &tokio::runtime::Runtime) {
    let shapes: [(&str, serde_json::Value); 4] = [
        (
            "tiny objects `{\"\":0}`",
            json!(vec![json!({"": 0}); 14_000]),
        ),
        ("small numbers", json!(vec![1; 50_000])),
        ("one-letter strings", json!(vec!["a"; 25_000])),
        ("one string of 1 MB", json!("x".repeat(1_000_000))),
    ];
    println!(
        "\n| a waiting call's `_meta` made of | its body | calls admitted under {REQUEST_MEMORY_MIB} MiB | counted per call | resident per call | counted / resident |"
    );
    println!("|---|---|---|---|---|---|");
    for (shape, pad) in shapes {
        let root = scratch_dir("bench-requests");
        let dir = root.join("plugins");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::copy(plugin_path("sleeper"), dir.join("sleeper.wasm")).expect("copy");
        let memory = REQUEST_MEMORY_MIB.to_string();
        let (admitted, body, grown) = runtime.block_on(async {
            let (mut child, pid, url) = spawn_serve(
                &root,
                &dir,
                &[
                    "--no-auth",
                    "--request-memory-mib",
                    &memory,
                    "--max-body-kib",
                    "1024",
                    "--timeout-ms",
                    "120000",
                    "--max-sessions",
                    "1000",
                ],
            )
            .await;
            let address = url
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned();
            // A session for each call (its instance serves that call alone), opened and
            // warmed before the memory is read. Raw HTTP: rmcp's client waits and sends a
            // request again when the server answers 503.
            let message = |id: u64, method: &str, params: serde_json::Value| {
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
            };
            let mut sessions = Vec::new();
            for _ in 0..SESSIONS_FOR_REQUESTS {
                let initialize = message(
                    1,
                    "initialize",
                    json!({"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "1"}}),
                );
                let (_, head, stream) = post_raw(&address, None, &initialize).await;
                drain(stream).await;
                let session = llm_worker_tests::header_in(&head, "mcp-session-id")
                    .expect("a session id")
                    .to_owned();
                let initialized =
                    json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
                drain(post_raw(&address, Some(&session), &initialized).await.2).await;
                let warm = message(
                    2,
                    "tools/call",
                    json!({"name": "sleep", "arguments": {"ms": 0}}),
                );
                drain(post_raw(&address, Some(&session), &warm).await.2).await;
                sessions.push(session);
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            let before = resident(pid);
            let call = message(
                3,
                "tools/call",
                json!({"name": "sleep", "arguments": {"ms": 60_000}, "_meta": {"pad": pad}}),
            );
            let body = call.len();
            // Calls sent one after another, each on a session of its own, until one is
            // refused; the others wait, holding their requests.
            let mut held = Vec::new();
            let mut refused = false;
            for session in &sessions {
                let (status, _, stream) = post_raw(&address, Some(session), &call).await;
                if status != 200 {
                    refused = true;
                    break;
                }
                held.push(stream);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let admitted = held.len();
            let after = resident(pid);
            drop(held);
            let _ = child.kill().await;
            let grown = before
                .zip(after)
                .filter(|_| refused)
                .map(|(before, after)| after.saturating_sub(before));
            (admitted, body, grown)
        });
        let counted = (REQUEST_MEMORY_MIB << 20) as f64 / admitted.max(1) as f64;
        match grown {
            Some(grown) if admitted > 0 => {
                let resident = grown as f64 / admitted as f64;
                println!(
                    "| {shape} | {:.0} KB | {admitted} | {:.0} KiB | {:.0} KiB | {:.2}× |",
                    body as f64 / 1000.0,
                    counted / 1024.0,
                    resident / 1024.0,
                    counted / resident
                );
            }
            _ => println!(
                "| {shape} | {body} B | {admitted} | – | (no /proc here, or none refused) | – |"
            ),
        }
    }
}

const SECTIONS: [&str; 6] = ["throughput", "stdio", "open", "memory", "requests", "start"];

fn main() {
    if let Ok(which) = std::env::var(STDIO_SERVER) {
        return serve_on_stdio(&which);
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let wanted =
        |section: &str| filters.is_empty() || filters.iter().any(|f| section.contains(f.as_str()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("\nllm-worker serving benchmarks (ratios from this run)");
    for section in SECTIONS.into_iter().filter(|s| wanted(s)) {
        match section {
            "throughput" => section_throughput(&runtime),
            "stdio" => section_stdio(&runtime),
            "open" => section_open(&runtime),
            "memory" => section_memory(&runtime),
            "requests" => section_requests(&runtime),
            _ => section_start(),
        }
    }
    println!();
}
