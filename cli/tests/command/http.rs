//! `llm-worker serve --http` driven by rmcp's HTTP client (and raw HTTP where a client library
//! would not send what an attacker sends): sessions, tokens, the session cap, expiry,
//! cancellation, progress, the stateless protocol revision.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use llm_worker_tests::wait::{until, within};
use llm_worker_tests::{ScratchDir, plugin_path, scratch_dir};
use rmcp::ServiceExt;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use super::mcp::{call, deploy, text};

/// A running `llm-worker serve --http` and its URL.
struct Server {
    child: tokio::process::Child,
    url: String,
    dir: std::path::PathBuf,
    /// The token the server generated for its user (`XDG_STATE_HOME` is the test's own),
    /// unless it was started with `--token-file` or `--no-auth`.
    token: Option<String>,
    /// What it says on stderr, line by line, from after it said it serves.
    stderr: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<String>>,
    /// Its plugins, cache and state; after `child`, so that the server is stopped first.
    _root: ScratchDir,
}

impl Server {
    /// The plugin directory served.
    fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Serves `plugins` on `address` with `flags`.
    async fn start(name: &str, plugins: &[&str], address: &str, flags: &[&str]) -> Self {
        Self::try_start(name, plugins, address, flags)
            .await
            .unwrap_or_else(|stderr| panic!("the server did not start: {stderr}"))
    }

    /// Like `start`; on failure, what the server said on stderr.
    async fn try_start(
        name: &str,
        plugins: &[&str],
        address: &str,
        flags: &[&str],
    ) -> Result<Self, String> {
        let root = scratch_dir(name);
        let dir = root.join("plugins");
        std::fs::create_dir(&dir).expect("mkdir");
        for plugin in plugins {
            std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
        }
        let state = root.join("state");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
            .env("XDG_STATE_HOME", &state)
            .args(["serve", "--http", address, "--cache-dir"])
            .arg(root.join("cache"))
            .args(flags)
            .arg(&dir)
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn");
        let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut said = String::new();
        let url = within("the server to start serving or to end", async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("llm-worker: serving MCP on ") {
                    return Some(url.to_owned());
                }
                said.push_str(&line);
                said.push('\n');
            }
            None
        })
        .await;
        // Keep draining stderr, so that the server never blocks on a full pipe, and keep its
        // lines for `said`.
        let (send, receive) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = send.send(line);
            }
        });
        let token = std::fs::read_to_string(state.join("llm-worker").join("http-token"))
            .ok()
            .map(|text| text.trim().to_owned());
        match url {
            Some(url) => Ok(Self {
                child,
                url,
                dir,
                token,
                stderr: tokio::sync::Mutex::new(receive),
                _root: root,
            }),
            None => Err(said),
        }
    }

    /// Waits until the server says `needle` on stderr, after what it said at the last call,
    /// and returns the line.
    async fn said(&self, needle: &str) -> String {
        let mut lines = self.stderr.lock().await;
        within(&format!("the server to say {needle:?}"), async {
            while let Some(line) = lines.recv().await {
                if line.contains(needle) {
                    return line;
                }
            }
            panic!("the server ended without saying {needle:?}");
        })
        .await
    }

    /// A client transport's settings for the server, with its generated token.
    fn transport(&self) -> StreamableHttpClientTransportConfig {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str());
        if let Some(token) = &self.token {
            config = config.auth_header(token.as_str());
        }
        config
    }

    /// The `Authorization` header of raw requests.
    fn authorization(&self) -> String {
        format!(
            "Authorization: Bearer {}",
            self.token.as_deref().unwrap_or_default()
        )
    }

    /// The `127.0.0.1:PORT` the server listens on.
    fn authority(&self) -> &str {
        self.url.trim_start_matches("http://").trim_end_matches('/')
    }

    async fn client(&self) -> RunningService<RoleClient, ()> {
        connect(&self.url, self.token.as_deref())
            .await
            .expect("initialize over HTTP")
    }

    /// Stops the server, and waits for it to end before its directory goes.
    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// An MCP session with the server at `url`, with a bearer token if given.
async fn connect(url: &str, token: Option<&str>) -> Result<RunningService<RoleClient, ()>, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|e| e.to_string())
}

async fn count<H: rmcp::ClientHandler>(client: &RunningService<RoleClient, H>) -> String {
    text(
        &client
            .call_tool(call("count", json!({})))
            .await
            .expect("count"),
    )
}

/// A raw HTTP/1.1 POST of `body` with extra `headers`; returns the status line and the rest.
fn raw_post(authority: &str, headers: &[&str], body: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(authority).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut request = format!(
        "POST / HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let (status, rest) = response.split_once("\r\n").unwrap_or((&response, ""));
    (status.to_owned(), rest.to_owned())
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_http_session_has_its_own_plugin_state() {
    let server = Server::start("http-sessions", &["counter", "calc"], "127.0.0.1:0", &[]).await;
    let first = server.client().await;
    let second = server.client().await;
    assert_eq!(count(&first).await, "0");
    assert_eq!(count(&first).await, "1");
    assert_eq!(count(&second).await, "0", "a new session starts afresh");
    assert_eq!(count(&first).await, "2");
    assert_eq!(count(&second).await, "1");
    let info = first
        .peer_info()
        .and_then(|info| info.server_info.clone())
        .expect("server info");
    assert_eq!(info.name, "llm-worker");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    first.cancel().await.expect("close");
    // A session opened after another ended starts afresh too.
    let third = server.client().await;
    assert_eq!(count(&third).await, "0");
    second.cancel().await.expect("close");
    third.cancel().await.expect("close");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_the_server_needs_tokens() {
    let refused = Server::try_start("http-no-token", &["counter"], "0.0.0.0:0", &[]).await;
    let said = refused.err().expect("refused without tokens");
    assert!(
        said.contains("without authentication") && said.contains("--token-file"),
        "{said}"
    );

    let tokens_dir = scratch_dir("http-token-file");
    let tokens = tokens_dir.join("tokens");
    std::fs::write(
        &tokens,
        "# the team's tokens\nfirst-secret-token\n\nsecond-token\n",
    )
    .expect("tokens");
    let server = Server::start(
        "http-token",
        &["counter"],
        "0.0.0.0:0",
        &["--token-file", tokens.to_str().expect("utf-8")],
    )
    .await;
    // The server listens on every interface; talk to it on loopback.
    let port = server
        .authority()
        .rsplit(':')
        .next()
        .expect("port")
        .to_owned();
    let (authority, url) = (
        format!("127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}/"),
    );
    let (status, rest) = raw_post(&authority, &[], INITIALIZE);
    assert!(status.contains("401"), "{status}");
    assert!(
        rest.to_ascii_lowercase()
            .contains("www-authenticate: bearer realm=\"llm-worker\""),
        "{rest}"
    );
    let (status, _) = raw_post(
        &authority,
        &["Authorization: Bearer first-secret-tokeN"],
        INITIALIZE,
    );
    assert!(status.contains("401"), "a near miss is refused: {status}");
    assert!(connect(&url, None).await.is_err());
    for token in ["first-secret-token", "second-token"] {
        let client = connect(&url, Some(token)).await.expect("admitted");
        assert_eq!(count(&client).await, "0");
        client.cancel().await.expect("close");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_loopback_other_users_need_the_generated_token() {
    let server = Server::start("http-loopback-token", &["counter"], "127.0.0.1:0", &[]).await;
    let token = server
        .token
        .clone()
        .expect("a token was generated and kept");
    assert_eq!(token.len(), 64, "256 random bits in hex: {token}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let file = server
            .dir()
            .parent()
            .expect("root")
            .join("state/llm-worker/http-token");
        let mode = std::fs::metadata(&file)
            .expect("token file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "only the user may read it: {mode:o}");
    }
    // Another local user, without the token: refused, as off loopback.
    let (status, rest) = raw_post(server.authority(), &[], INITIALIZE);
    assert!(status.contains("401"), "{status}");
    assert!(rest.contains("bearer token"), "{rest}");
    assert!(connect(&server.url, None).await.is_err());
    assert!(connect(&server.url, Some("not-the-token")).await.is_err());
    let client = server.client().await;
    assert_eq!(count(&client).await, "0");
    client.cancel().await.expect("close");
    server.stop().await;

    // The explicit opt-out, on loopback only.
    let open = Server::start("http-no-auth", &["counter"], "127.0.0.1:0", &["--no-auth"]).await;
    assert!(open.token.is_none(), "no token is generated with --no-auth");
    let client = connect(&open.url, None)
        .await
        .expect("admitted without a token");
    assert_eq!(count(&client).await, "0");
    client.cancel().await.expect("close");
    open.stop().await;
    let refused = Server::try_start(
        "http-no-auth-off",
        &["counter"],
        "0.0.0.0:0",
        &["--no-auth"],
    )
    .await
    .err()
    .expect("--no-auth is refused off loopback");
    assert!(
        refused.contains("--no-auth") && refused.contains("loopback"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_and_hosts_are_checked() {
    let server = Server::start("http-origin", &["counter"], "127.0.0.1:0", &[]).await;
    let token = server.authorization();
    for headers in [
        vec!["Origin: https://evil.example"],
        vec!["Origin: https://evil.example", &token],
    ] {
        let (status, _) = raw_post(server.authority(), &headers, INITIALIZE);
        assert!(
            status.contains("403"),
            "a web page of another origin, with or without the token: {status}"
        );
    }
    // The server's own origin is not a foreign one (a page it serves, the conformance suite).
    let port = server
        .authority()
        .rsplit(':')
        .next()
        .expect("port")
        .to_owned();
    let own = format!("Origin: http://{}", server.authority());
    let (status, _) = raw_post(server.authority(), &[&own, &token], INITIALIZE);
    assert!(status.contains("200"), "same origin: {status}");
    let mut stream = std::net::TcpStream::connect(server.authority()).expect("connect");
    let request = format!(
        "POST / HTTP/1.1\r\nHost: localhost:{port}\r\nOrigin: http://localhost:{port}\r\n{token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "localhost's own origin: {response}"
    );
    // Another port of the same host is another origin.
    let other = format!(
        "Origin: http://127.0.0.1:{}",
        port.parse::<u16>().expect("port") ^ 1
    );
    let (status, _) = raw_post(server.authority(), &[&other, &token], INITIALIZE);
    assert!(status.contains("403"), "another port: {status}");
    // A DNS-rebinding page reaches the server under its own name.
    let mut stream = std::net::TcpStream::connect(server.authority()).expect("connect");
    let request = format!(
        "POST / HTTP/1.1\r\nHost: evil.example\r\n{token}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(
        response.starts_with("HTTP/1.1 403"),
        "a rebound Host, with the token: {response}"
    );
    // Request bodies are bounded.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(5 << 20)
    );
    let (status, _) = raw_post(server.authority(), &[&server.authorization()], &huge);
    assert!(status.contains("413"), "{status}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_and_expire() {
    let server = Server::start(
        "http-cap",
        &["counter"],
        "127.0.0.1:0",
        &[
            "--max-sessions",
            "1",
            "--idle-timeout",
            "2",
            "--timeout-ms",
            "1000",
            // Debug logs: the server says when a session ends.
            "-v",
        ],
    )
    .await;
    let first = server.client().await;
    assert_eq!(count(&first).await, "0");
    let refused = connect(&server.url, server.token.as_deref()).await;
    assert!(refused.is_err(), "a second session is refused");
    let (status, body) = raw_post(server.authority(), &[&server.authorization()], INITIALIZE);
    assert!(status.contains("503"), "{status}");
    assert!(body.contains("1 sessions open, its limit"), "{body}");
    // The first session is not disturbed.
    assert_eq!(count(&first).await, "1");

    // Idle past the timeout, the session is closed and its instances dropped (the server
    // says so): rmcp's client opens a new session by itself, which starts afresh.
    server.said("an MCP session ended").await;
    assert_eq!(
        count(&first).await,
        "0",
        "the expired session's state is gone"
    );
    first.cancel().await.expect("close");
    // Closing a session frees its slot: the server ends the session after the client's
    // DELETE, a moment later (it says so), and a new client is admitted.
    server.said("an MCP session ended").await;
    let fresh = connect(&server.url, server.token.as_deref())
        .await
        .unwrap_or_else(|error| panic!("the closed session's slot was not freed: {error}"));
    assert_eq!(count(&fresh).await, "0");
    fresh.cancel().await.expect("close");
    server.stop().await;
}

/// Counts the progress notifications a client receives.
#[derive(Clone, Default)]
struct ProgressCounter {
    seen: Arc<AtomicUsize>,
}

impl rmcp::ClientHandler for ProgressCounter {
    async fn on_progress(
        &self,
        _params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.seen.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stops_and_progress_is_reported() {
    // Logs at debug level: the server says when it stops a call.
    let server = Server::start(
        "http-cancel",
        &["sleeper", "counter"],
        "127.0.0.1:0",
        &["-v"],
    )
    .await;
    let progress = ProgressCounter::default();
    let seen = Arc::clone(&progress.seen);
    let client = progress
        .serve(StreamableHttpClientTransport::from_config(
            server.transport(),
        ))
        .await
        .expect("initialize");
    let quick = client
        .call_tool(call("spin", json!({"ms": 1})))
        .await
        .expect("spin");
    assert_ne!(quick.is_error, Some(true), "{}", text(&quick));
    // A quick call's result is all its progress; a longer one reports its start and finish,
    // for the progress token rmcp's client sends.
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    let slow = client
        .call_tool(call("spin", json!({"ms": 300})))
        .await
        .expect("spin");
    assert_ne!(slow.is_error, Some(true), "{}", text(&slow));
    until("the slow call's two progress notifications", || {
        seen.load(Ordering::SeqCst) >= 2
    })
    .await;

    // rmcp's client sends notifications/cancelled when the call is dropped: here once the
    // plugin runs it (it says so as it begins; its sleep is the call to cancel).
    tokio::select! {
        ended = client.call_tool(call("sleep", json!({"ms": 5000}))) => {
            panic!("a call of 5 s ended first: {ended:?}")
        }
        _ = server.said("sleeping 5000 ms") => {}
    }
    server.said("a call was dropped by its caller").await;
    // The instance was reset (a call still running would hold it for 5 s more, then this
    // call would see no "abandoned" but a sleep's result).
    let next = client
        .call_tool(call("spin", json!({"ms": 1})))
        .await
        .expect("a result");
    assert_eq!(next.is_error, Some(true));
    assert!(text(&next).contains("abandoned"), "{}", text(&next));
    let after = client
        .call_tool(call("spin", json!({"ms": 1})))
        .await
        .expect("a result");
    assert_ne!(after.is_error, Some(true), "{}", text(&after));
    client.cancel().await.expect("close");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_clients_get_a_fresh_session_per_request() {
    let server = Server::start("http-stateless", &["counter"], "127.0.0.1:0", &[]).await;
    let client = ()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(server.transport()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("server/discover");
    let tools: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect();
    assert_eq!(tools, ["count", "peek"]);
    // No session: every request is one, with instances of its own.
    assert_eq!(count(&client).await, "0");
    assert_eq!(count(&client).await, "0");
    client.cancel().await.expect("close");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reloads_reach_every_http_session() {
    // Logs at debug level: the watcher says when it reloaded the directory, and with what
    // outcome.
    let server = Server::start(
        "http-watch",
        &["counter"],
        "127.0.0.1:0",
        &["--watch", "-v"],
    )
    .await;
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let watcher = super::mcp::Watcher::default();
        let (changes, notified) = (Arc::clone(&watcher.changes), Arc::clone(&watcher.count));
        let client = watcher
            .serve(StreamableHttpClientTransport::from_config(
                server.transport(),
            ))
            .await
            .expect("initialize");
        sessions.push((client, changes, notified));
    }
    assert_eq!(count(&sessions[0].0).await, "0");
    assert_eq!(count(&sessions[0].0).await, "1");
    assert_eq!(count(&sessions[1].0).await, "0");

    deploy("greet", &server.dir().join("greet.wasm"));
    server.said("the served plugins changed").await;
    for (client, changes, notified) in &sessions {
        within(
            "notifications/tools/list_changed in every session",
            changes.notified(),
        )
        .await;
        assert_eq!(notified.load(Ordering::SeqCst), 1);
        let names: Vec<String> = client
            .list_all_tools()
            .await
            .expect("list")
            .into_iter()
            .map(|t| t.name.into_owned())
            .collect();
        assert_eq!(names, ["count", "greet", "peek"]);
    }
    // The same bytes put over a plugin (a new file, a new modification time): the watcher
    // notices, reloads, and finds that nothing changed (it says so).
    deploy("counter", &server.dir().join("counter.wasm"));
    server.said("the served plugins are unchanged").await;
    // Each session kept its own state of the unchanged plugin, and its tools; no client was
    // told of a change.
    assert_eq!(count(&sessions[0].0).await, "2");
    assert_eq!(count(&sessions[1].0).await, "1");
    for (client, _, notified) in &sessions {
        let names: Vec<String> = client
            .list_all_tools()
            .await
            .expect("list")
            .into_iter()
            .map(|t| t.name.into_owned())
            .collect();
        assert_eq!(names, ["count", "greet", "peek"]);
        assert_eq!(notified.load(Ordering::SeqCst), 1, "no list_changed since");
    }
    for (client, _, _) in sessions {
        client.cancel().await.expect("close");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_is_resolved() {
    let server = Server::start("http-localhost", &["counter"], "localhost:0", &[]).await;
    let client = server.client().await;
    assert_eq!(count(&client).await, "0");
    client.cancel().await.expect("close");
    server.stop().await;
}
