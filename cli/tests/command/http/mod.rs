//! `llm-worker serve --http` driven by rmcp's HTTP client (and raw HTTP where a client library
//! would not send what an attacker sends): sessions, tokens, the session cap, expiry,
//! cancellation, progress, the stateless protocol revision.
//!
//! This module holds the server under test and the clients' helpers; the tests are in its
//! submodules.

mod admission;
mod calls;
mod identities;
mod metrics;
mod oauth;
mod sessions;
mod traces;

use std::io::{Read, Write};
use std::time::Duration;

use llm_worker_tests::wait::within;
use llm_worker_tests::{ScratchDir, compiled_cache, plugin_path, scratch_dir};
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use super::mcp::{call, text};

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
    /// What it said on stderr before it said it serves.
    startup: String,
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
        Self::try_start_with(name, plugins, &[], address, flags).await
    }

    /// Like `try_start`, with each `(path, text)` of `files` written first, `path` relative to
    /// the plugin directory (a policy beside a plugin; `../data/x` beside the directory).
    async fn try_start_with(
        name: &str,
        plugins: &[&str],
        files: &[(&str, &str)],
        address: &str,
        flags: &[&str],
    ) -> Result<Self, String> {
        Self::try_start_full(name, plugins, files, &[], address, flags).await
    }

    /// Serves `plugins` on loopback with `flags` and the environment variables `env`.
    async fn start_with_env(
        name: &str,
        plugins: &[&str],
        env: &[(&str, &str)],
        flags: &[&str],
    ) -> Self {
        Self::try_start_full(name, plugins, &[], env, "127.0.0.1:0", flags)
            .await
            .unwrap_or_else(|stderr| panic!("the server did not start: {stderr}"))
    }

    /// Like `try_start_with`, with the environment variables `env`.
    async fn try_start_full(
        name: &str,
        plugins: &[&str],
        files: &[(&str, &str)],
        env: &[(&str, &str)],
        address: &str,
        flags: &[&str],
    ) -> Result<Self, String> {
        let root = scratch_dir(name);
        let dir = root.join("plugins");
        std::fs::create_dir(&dir).expect("mkdir");
        for plugin in plugins {
            // `NAME@0.3`: the plugin as the SDK built it for contract 0.3.0.
            let (source, plugin) = match plugin.strip_suffix("@0.3") {
                Some(name) => (llm_worker_tests::plugin_v03_path(name), name),
                None => (plugin_path(plugin), *plugin),
            };
            std::fs::copy(source, dir.join(format!("{plugin}.wasm"))).expect("copy");
        }
        for (path, text) in files {
            let path = dir.join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("mkdir");
            }
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        let state = root.join("state");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
            .env("XDG_STATE_HOME", &state)
            .envs(env.iter().copied())
            .args(["serve", "--http", address, "--cache-dir"])
            .arg(compiled_cache())
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
                startup: said,
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

    /// A client of revision 2026-07-28: stateless, `server/discover` instead of a session.
    async fn stateless_client(&self) -> RunningService<RoleClient, ()> {
        use rmcp::model::ProtocolVersion;
        use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
        ().serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(self.transport()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("server/discover")
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

/// A GET of `path` from `authority` (HTTP/1.0: a body without chunks): the status line and
/// the body.
fn raw_get(authority: &str, path: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(authority).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, body.to_owned())
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
    // A server refusing the request (a bad `Host`, `Origin`, …) may answer and close before it
    // has read all of it: the write then fails, and the answer is still there to read.
    let sent = stream.write_all(request.as_bytes());
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    if response.is_empty() {
        sent.expect("send");
    }
    let (status, rest) = response.split_once("\r\n").unwrap_or((&response, ""));
    (status.to_owned(), rest.to_owned())
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
