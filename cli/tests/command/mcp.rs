//! `llm-worker serve` driven by a real MCP client (rmcp's) over the child's stdio.

use llm_worker_tests::wait::{until, within};
use llm_worker_tests::{ScratchDir, compiled_cache, plugin_path, scratch_dir};
use rmcp::ServiceExt;

use super::cli::plugin_dir;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

pub(crate) fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("")
}

/// `llm-worker serve` over stdio, for a fresh directory holding copies of `plugins` (removed
/// when the second value is dropped).
fn serve(name: &str, plugins: &[&str]) -> (TokioChildProcess, ScratchDir) {
    let (root, dir, cache) = plugin_dir(name, plugins);
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command.arg("serve").arg("--cache-dir").arg(cache).arg(&dir);
    let child = TokioChildProcess::new(command).expect("spawn llm-worker serve");
    (child, root)
}

pub(crate) fn call(name: &'static str, arguments: serde_json::Value) -> CallToolRequestParams {
    let arguments = match arguments {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_lists_and_calls_tools_in_one_session() {
    let (transport, _dir) = serve("mcp", &["counter", "calc", "greet"]);
    let client = ().serve(transport).await.expect("initialize");

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["add", "count", "divide", "greet", "isqrt", "peek"]);
    let greet = tools.iter().find(|t| t.name == "greet").expect("greet");
    assert_eq!(
        greet.description.as_deref(),
        Some("挨拶する\nGreets someone by name.")
    );
    assert_eq!(greet.input_schema["required"], json!(["name"]));

    let hello = client
        .call_tool(call("greet", json!({"name": "MCP"})))
        .await
        .expect("tools/call");
    assert_eq!(text(&hello), "Hello, MCP!");
    assert_ne!(hello.is_error, Some(true));

    // One connection is one session: the counter keeps its state between calls.
    for expected in ["0", "1", "2"] {
        let count = client
            .call_tool(call("count", json!({})))
            .await
            .expect("count");
        assert_eq!(text(&count), expected);
    }

    // A tool's error is a result with isError, not a protocol error.
    let failed = client
        .call_tool(call("divide", json!({"dividend": 1, "divisor": 0})))
        .await
        .expect("a tool error is still a result");
    assert_eq!(failed.is_error, Some(true));
    assert!(
        text(&failed).contains("division by zero"),
        "{}",
        text(&failed)
    );
    let invalid = client
        .call_tool(call("add", json!({"a": "one"})))
        .await
        .expect("result");
    assert_eq!(invalid.is_error, Some(true));
    assert!(text(&invalid).contains("at /a:"), "{}", text(&invalid));

    let unknown = client.call_tool(call("nope", json!({}))).await;
    assert!(
        unknown.is_err(),
        "an unknown tool is a protocol error: {unknown:?}"
    );

    client.cancel().await.expect("close");
}

/// A client that counts `notifications/tools/list_changed`, and wakes `changes` at each.
#[derive(Clone, Default)]
pub(crate) struct Watcher {
    pub(crate) changes: std::sync::Arc<tokio::sync::Notify>,
    pub(crate) count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl rmcp::ClientHandler for Watcher {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.changes.notify_one();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_picks_up_new_changed_and_broken_plugins() {
    let root = scratch_dir("mcp-watch");
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(plugin_path("counter"), dir.join("counter.wasm")).expect("copy");
    let (client, changes, mut stderr) = serve_watching(compiled_cache(), &dir).await;
    assert_eq!(
        names(client.list_all_tools().await.expect("list")),
        ["count", "peek"]
    );
    let count = client
        .call_tool(call("count", json!({})))
        .await
        .expect("count");
    assert_eq!(text(&count), "0");

    // A plugin dropped in: the client is told, and the new tool is listed and callable.
    deploy("greet", &dir.join("greet.wasm"));
    within("notifications/tools/list_changed", changes.notified()).await;
    assert_eq!(
        names(client.list_all_tools().await.expect("list")),
        ["count", "greet", "peek"]
    );
    let hello = client
        .call_tool(call("greet", json!({"name": "new"})))
        .await
        .expect("greet");
    assert_eq!(text(&hello), "Hello, new!");
    let count = client
        .call_tool(call("count", json!({})))
        .await
        .expect("count");
    assert_eq!(text(&count), "1", "an unchanged plugin keeps its state");

    // A broken new version does not take the working tools away: once the watcher has looked
    // at it (it says so), greet still answers.
    std::fs::write(dir.join("greet.wasm"), b"broken").expect("break");
    std::fs::write(dir.join("other.wasm"), b"also broken").expect("write");
    let line = said(&mut stderr, "greet.wasm is not a WebAssembly file").await;
    assert!(line.contains("WARN"), "{line}");
    let hello = client
        .call_tool(call("greet", json!({"name": "still"})))
        .await
        .expect("greet");
    assert_eq!(text(&hello), "Hello, still!");

    // A removed plugin goes away.
    std::fs::remove_file(dir.join("greet.wasm")).expect("remove");
    within("notifications/tools/list_changed", changes.notified()).await;
    assert_eq!(
        names(client.list_all_tools().await.expect("list")),
        ["count", "peek"]
    );
    client.cancel().await.expect("close");
}

/// Lines a careless or hostile client sends get the answers JSON-RPC requires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_lines_get_json_rpc_errors() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    let root = scratch_dir("mcp-malformed");
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(plugin_path("counter"), dir.join("counter.wasm")).expect("copy");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
        .arg("serve")
        .arg("--cache-dir")
        .arg(compiled_cache())
        .arg(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut send = async |line: &str| {
        stdin.write_all(line.as_bytes()).await.expect("write");
        stdin.write_all(b"\n").await.expect("write");
    };
    send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#).await;
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list""#).await;
    send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"count","arguments":[1]}}"#).await;
    send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"count","arguments":{}}}"#).await;
    let mut answers = Vec::new();
    while answers.len() < 4 {
        let line = within("an answer", lines.next_line())
            .await
            .expect("read")
            .expect("a line");
        answers.push(serde_json::from_str::<serde_json::Value>(&line).expect("JSON"));
    }
    let by_id = |id: serde_json::Value| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no answer with id {id}: {answers:?}"))
    };
    assert_eq!(by_id(json!(null))["error"]["code"], -32700);
    assert_eq!(by_id(json!(3))["error"]["code"], -32602);
    assert_eq!(by_id(json!(4))["result"]["content"][0]["text"], "0");
    let info = &by_id(json!(1))["result"]["serverInfo"];
    assert_eq!(info["name"], "llm-worker");
    // Clients are not told where the plugins are on the server's machine.
    let said = by_id(json!(1))["result"].to_string();
    assert!(
        !said.contains(dir.to_str().expect("utf-8")),
        "the plugin directory reached the client: {said}"
    );
    drop(stdin);
    let _ = child.wait().await;
}

/// `serve` reads a pipe and writes a Unix socket (what Node gives a child) through the
/// runtime's reactor, in non-blocking mode, and sets their modes back when the session ends,
/// by the client's going or by SIGTERM: the open files may be shared with other processes.
#[cfg(unix)]
#[test]
fn serve_speaks_over_pipes_and_sockets_and_sets_their_mode_back() {
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::net::UnixStream;

    use rustix::fs::{OFlags, fcntl_getfl};

    let (_root, dir) = counter_dir("mcp-streams");
    for by_signal in [false, true] {
        let (stdin, to_server) = std::io::pipe().expect("pipe");
        // The test keeps the pipe's read end and the server's socket too, to see their modes.
        let kept_pipe = stdin.try_clone().expect("dup");
        let (from_server, stdout) = UnixStream::pair().expect("socket pair");
        let kept_socket = stdout.try_clone().expect("dup");
        from_server
            .set_read_timeout(Some(std::time::Duration::from_secs(120)))
            .expect("timeout");
        let nonblocking = || {
            [kept_pipe.as_fd(), kept_socket.as_fd()]
                .map(|fd| fcntl_getfl(fd).expect("flags").contains(OFlags::NONBLOCK))
        };
        assert_eq!(nonblocking(), [false, false]);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
            .arg("serve")
            .arg("--cache-dir")
            .arg(compiled_cache())
            .arg(&dir)
            .stdin(stdin)
            .stdout(OwnedFd::from(stdout))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let to_server = answered_through(to_server, &from_server);
        // Serving, it reads and writes them through the reactor ...
        assert_eq!(nonblocking(), [true, true]);
        // ... and when the session ends, it sets their modes back before it exits.
        if by_signal {
            let pid = rustix::process::Pid::from_child(&child);
            rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
        }
        drop(to_server);
        let status = child.wait().expect("wait");
        assert!(status.success(), "{status}");
        assert_eq!(
            nonblocking(),
            [false, false],
            "ended by a signal: {by_signal}"
        );
    }
}

/// A scratch directory holding `plugins/counter.wasm`, and that plugin directory.
#[cfg(unix)]
fn counter_dir(name: &str) -> (llm_worker_tests::ScratchDir, std::path::PathBuf) {
    let root = scratch_dir(name);
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(plugin_path("counter"), dir.join("counter.wasm")).expect("copy");
    (root, dir)
}

/// A client that starts `serve` and never initializes (or stalls before it does): SIGTERM
/// stops the server all the same, and the modes are set back (the signal was taken and then
/// waited for the handshake, so only SIGKILL, leaving the modes set, could stop it).
#[cfg(unix)]
#[test]
fn serve_stops_on_a_signal_before_any_session() {
    use std::io::BufRead as _;
    use std::os::fd::AsFd;

    use rustix::fs::{OFlags, fcntl_getfl};

    let (_root, dir) = counter_dir("mcp-stop-early");
    let (stdin, to_server) = std::io::pipe().expect("pipe");
    let kept_pipe = stdin.try_clone().expect("dup");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
        .arg("-v")
        .arg("serve")
        .arg("--cache-dir")
        .arg(compiled_cache())
        .arg(&dir)
        .stdin(stdin)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // It says it serves once it watches the signals.
    let mut said = std::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    assert!(
        said.by_ref()
            .map_while(Result::ok)
            .any(|line| line.contains("serving MCP on stdio")),
        "serve did not say it serves"
    );
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
    // Waited for on a thread of its own, so that a server that does not stop fails the test
    // (and is killed) instead of holding it.
    let (ended, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut child = child;
        let _ = ended.send(child.wait());
    });
    let Ok(status) = exited.recv_timeout(std::time::Duration::from_secs(60)) else {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        panic!("serve did not stop on SIGTERM while no client had initialized");
    };
    let status = status.expect("wait");
    assert!(status.success(), "{status}");
    let nonblocking = fcntl_getfl(kept_pipe.as_fd())
        .expect("flags")
        .contains(OFlags::NONBLOCK);
    assert!(!nonblocking, "the mode of stdin was set back");
    drop((to_server, said));
}

/// Opens an MCP session through `to_server` and `from_server`, and checks a call's answer;
/// returns the way to the server, still open.
#[cfg(unix)]
fn answered_through(
    mut to_server: std::io::PipeWriter,
    from_server: &std::os::unix::net::UnixStream,
) -> std::io::PipeWriter {
    use std::io::{BufRead, Write};
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"count","arguments":{}}}"#,
    ] {
        writeln!(to_server, "{line}").expect("write");
    }
    let mut lines = std::io::BufReader::new(from_server).lines();
    let mut answers = Vec::new();
    while answers.len() < 2 {
        let line = lines.next().expect("an answer").expect("read");
        answers.push(serde_json::from_str::<serde_json::Value>(&line).expect("JSON"));
    }
    let called = answers
        .iter()
        .find(|answer| answer["id"] == 2)
        .expect("the call's answer");
    assert_eq!(called["result"]["content"][0]["text"], "0", "{answers:?}");
    to_server
}

type Shared<T> = std::sync::Arc<std::sync::Mutex<Vec<T>>>;

/// What an MCP client receives besides results: progress and log notifications.
#[derive(Clone, Default)]
struct Listener {
    progress: Shared<(f64, Option<f64>)>,
    logs: Shared<(String, serde_json::Value)>,
}

#[allow(deprecated)] // MCP logging: deprecated by a draft revision, still what clients use.
impl rmcp::ClientHandler for Listener {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let mut progress = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        progress.push((params.progress, params.total));
    }

    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let mut logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.push((params.logger.unwrap_or_default(), params.data));
    }
}

#[allow(deprecated)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_sees_titles_hints_output_schemas_structured_results_logs_and_progress() {
    let (transport, _dir) = serve("mcp-contract", &["text", "search"]);
    let listener = Listener::default();
    let (progress, logs) = (listener.progress.clone(), listener.logs.clone());
    let client = listener.serve(transport).await.expect("initialize");

    let tools = client.list_all_tools().await.expect("tools/list");
    let stats = tools.iter().find(|t| t.name == "stats").expect("stats");
    assert_eq!(stats.title.as_deref(), Some("Text statistics"));
    let hints = stats.annotations.as_ref().expect("annotations");
    assert_eq!(hints.read_only_hint, Some(true));
    assert_eq!(hints.idempotent_hint, Some(true));
    assert_eq!(
        hints.open_world_hint,
        Some(false),
        "no HTTP grant: closed world"
    );
    let output_schema = stats.output_schema.as_ref().expect("outputSchema");
    assert_eq!(output_schema["type"], "object");
    // A tool without a structured result has no output schema; every tool's hints say it
    // cannot reach the outside world (no plugin here has an HTTP grant).
    let join = tools.iter().find(|t| t.name == "join").expect("join");
    assert!(join.output_schema.is_none());
    assert_eq!(
        join.annotations.as_ref().and_then(|a| a.open_world_hint),
        Some(false)
    );

    // The structured result is the JSON object, valid against the output schema, and its
    // text is the content too.
    let result = client
        .call_tool(call("stats", json!({"text": "three small words"})))
        .await
        .expect("tools/call");
    let structured = result
        .structured_content
        .clone()
        .expect("structuredContent");
    assert_eq!(structured, json!({"words": 3, "chars": 17}));
    let validator =
        jsonschema::validator_for(&serde_json::Value::Object((**output_schema).clone()))
            .expect("a valid output schema");
    assert!(validator.is_valid(&structured));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text(&result)).expect("JSON text"),
        structured
    );

    // Logs come at the level the client asked for; progress for the token rmcp's client sends.
    client
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Info,
        ))
        .await
        .expect("logging/setLevel");
    let found = client
        .call_tool(call("search", json!({"query": "wasm"})))
        .await
        .expect("search");
    assert!(text(&found).contains("wasmtime"), "{}", text(&found));
    until("the search's last progress and its log message", || {
        let done = progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(4.0, Some(4.0)));
        done && !logs.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    })
    .await;
    let logs = logs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        logs,
        [(
            "search/search".to_owned(),
            json!("searching 4 documents for \"wasm\"")
        )],
        "the debug line is below the client's level"
    );
    let progress = progress.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(progress.contains(&(4.0, Some(4.0))), "{progress:?}");
    // rmcp's client runs its handlers concurrently, so the order seen here is not the order
    // sent; what shows is that no value was sent twice (the host sends a growing sequence).
    let mut done: Vec<f64> = progress.iter().map(|(done, _)| *done).collect();
    done.sort_by(f64::total_cmp);
    assert!(
        done.windows(2).all(|w| w[0] < w[1]) && done.iter().all(|d| *d <= 4.0),
        "progress values repeat or exceed the total: {progress:?}"
    );
    client.cancel().await.expect("close");
}

/// `llm-worker serve --watch` of `dir` over stdio, its client (counting list changes) and its
/// stderr, line by line.
pub(crate) async fn serve_watching(
    cache: &std::path::Path,
    dir: &std::path::Path,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, Watcher>,
    std::sync::Arc<tokio::sync::Notify>,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .args(["serve", "--watch", "--cache-dir"])
        .arg(cache)
        .arg(dir);
    let watcher = Watcher::default();
    let changes = std::sync::Arc::clone(&watcher.changes);
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = tokio::io::BufReader::new(stderr.expect("stderr")).lines();
    let client = watcher.serve(transport).await.expect("initialize");
    (client, changes, stderr)
}

/// Puts a copy of the plugin `name` at `path` whole, as an operator's deploy would (a copy
/// written in place could be seen half-written by the watcher, a change of its own).
pub(crate) fn deploy(name: &str, path: &std::path::Path) {
    let partial = path.with_extension("partial");
    std::fs::copy(plugin_path(name), &partial).expect("copy");
    std::fs::rename(&partial, path).expect("rename");
}

/// The names of `tools`, in order.
pub(crate) fn names(tools: Vec<rmcp::model::Tool>) -> Vec<String> {
    tools.into_iter().map(|t| t.name.into_owned()).collect()
}

/// Waits until the server says `needle` on stderr (within the tests' deadline).
pub(crate) async fn said(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    needle: &str,
) -> String {
    within(&format!("the server to say {needle:?}"), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(needle) {
                return line;
            }
        }
        panic!("the server ended without saying {needle:?}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_keeps_a_locked_directory_locked_and_follows_its_lock() {
    let root = scratch_dir("mcp-watch-locked");
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    for plugin in ["counter", "greet"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    let cli = env!("CARGO_BIN_EXE_llm-worker");
    let lock = |dir: &std::path::Path| {
        let status = std::process::Command::new(cli)
            .arg("lock")
            .arg("--cache-dir")
            .arg(compiled_cache())
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("lock");
        assert!(status.success());
    };
    lock(&dir);
    let (client, changes, mut stderr) = serve_watching(compiled_cache(), &dir).await;

    // The attacker swaps greet for another plugin and deletes the lock, as they can write the
    // directory: the reload refuses every change, and the approved greet keeps serving.
    std::fs::copy(plugin_path("calc"), dir.join("greet.wasm")).expect("swap");
    std::fs::remove_file(dir.join("llm-worker.lock")).expect("delete the lock");
    let line = said(&mut stderr, "still serving the plugins loaded before").await;
    assert!(line.contains("missing"), "{line}");
    let hello = client
        .call_tool(call("greet", json!({"name": "Ada"})))
        .await
        .expect("greet");
    assert_eq!(text(&hello), "Hello, Ada!", "the approved version serves");
    assert_eq!(
        names(client.list_all_tools().await.expect("list")),
        ["count", "greet", "peek"]
    );

    // The operator reviews and approves the new plugin: the watcher follows the lock.
    lock(&dir);
    within(
        "notifications/tools/list_changed after the lock was updated",
        changes.notified(),
    )
    .await;
    let tools = names(client.list_all_tools().await.expect("list"));
    assert!(tools.contains(&"add".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"greet".to_owned()), "{tools:?}");
    client.cancel().await.expect("close");
}

/// `schema --format mcp` prints what the server lists: one shape, titles, output schemas and
/// vouched hints included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_for_mcp_prints_what_the_server_lists() {
    let (_scratch, dir, cache) = plugin_dir("mcp-shape", &["text", "search", "greet"]);
    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
        .args(["schema", "--format", "mcp", "--cache-dir"])
        .arg(&cache)
        .arg(&dir)
        .output()
        .expect("run schema");
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&printed.stdout).expect("json");

    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .arg("serve")
        .arg("--cache-dir")
        .arg(&cache)
        .arg(&dir);
    let client =
        ().serve(TokioChildProcess::new(command).expect("spawn"))
            .await
            .expect("initialize");
    let listed = client.list_all_tools().await.expect("tools/list");
    let listed = serde_json::to_value(&listed).expect("tools as JSON");
    assert_eq!(printed["tools"], listed);
    // The shape carries what the tools declare, not only names and schemas.
    let stats = listed
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == "stats"))
        .expect("stats is listed");
    assert_eq!(stats["title"], "Text statistics");
    assert_eq!(stats["annotations"]["title"], "Text statistics");
    assert_eq!(stats["outputSchema"]["type"], "object");
    client.cancel().await.expect("close");
}

/// `-v` is for the operator's debugging, not a record of what users send: rmcp logs every
/// request and answer whole at `debug` (a tool's arguments, what a user typed into a form),
/// so those lines come only with `-vv`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbose_serving_does_not_log_what_clients_send() {
    for (flag, logged) in [("-v", false), ("-vv", true)] {
        let (root, dir, cache) = plugin_dir(&format!("mcp-verbose{flag}"), &["greet"]);
        let log = root.join("stderr.log");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
        command
            .arg(flag)
            .arg("serve")
            .arg("--cache-dir")
            .arg(cache)
            .arg(&dir)
            .env_remove("RUST_LOG");
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn llm-worker serve");
        let client = ().serve(transport).await.expect("initialize");
        let said = client
            .call_tool(call("greet", json!({"name": "sk-canary-0123"})))
            .await
            .expect("tools/call");
        assert_eq!(text(&said), "Hello, sk-canary-0123!");
        client.cancel().await.expect("close");
        let stderr = std::fs::read_to_string(&log).expect("stderr");
        assert!(stderr.contains("DEBUG"), "{flag}: {stderr}");
        assert_eq!(
            stderr.contains("sk-canary-0123"),
            logged,
            "{flag}: {stderr}"
        );
    }
}
