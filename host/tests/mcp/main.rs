//! The MCP server as a library (feature `mcp-http`): a catalog of native tools served over
//! streamable HTTP in-process, driven by rmcp's client.
// The server's futures (wasmtime's concurrent calls inside rmcp's handlers) nest deeper
// than the default limit of 128 lets the compiler lay them out.
#![recursion_limit = "256"]

mod access;
mod audit;
mod auth;
mod bodies;
mod calls;
mod catalog;
mod embedding;
mod metrics;
mod notices;
mod oauth;
mod speaking;
mod tasks;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use llm_worker::mcp::{HttpOptions, McpOptions, ToolCatalog, ToolGroup};
use llm_worker::{Tool, ToolDefinition, ToolError, ToolMeta};
use serde_json::json;

/// Counts its calls.
struct Counter(AtomicUsize);

#[async_trait]
impl Tool for Counter {
    async fn execute(&self, _input_json: &str) -> Result<String, ToolError> {
        Ok(self.0.fetch_add(1, Ordering::SeqCst).to_string())
    }
}

/// A group of counters named `names`, at `revision`.
fn counters(group: &str, revision: u64, names: &'static [&'static str]) -> ToolGroup {
    ToolGroup::new(group, revision, move || counter_definitions(names))
}

/// The definitions of counters named `names`: each factory makes a counter from 0.
fn counter_definitions(names: &'static [&'static str]) -> Vec<ToolDefinition> {
    names
        .iter()
        .map(|name| {
            let definition: ToolDefinition = Arc::new(move || {
                let meta = ToolMeta::new(*name)
                    .description("Counts")
                    .input_schema(json!({"type": "object"}));
                (
                    meta,
                    Arc::new(Counter(AtomicUsize::new(0))) as Arc<dyn Tool>,
                )
            });
            definition
        })
        .collect()
}

async fn serve(catalog: ToolCatalog, options: McpOptions) -> String {
    // These tests are about MCP, not authentication: loopback without tokens.
    serve_with(catalog, options, HttpOptions::default().no_auth(true)).await
}

/// The server on a loopback port of its own, with `http`'s options: its URL.
/// A stateless `subscriptions/listen` of revision 2026-07-28 (hearing of tool-list changes)
/// to `url` with `token`: a POST whose answer is a stream for as long as the client stays.
fn stateless_listen(client: &reqwest::Client, url: &str, token: &str) -> reqwest::RequestBuilder {
    let listen = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "subscriptions/listen",
        "params": {
            "notifications": {"toolsListChanged": true},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    });
    client
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(listen.to_string())
}

/// An rmcp client of a server of `catalog`, with `options`, initialized.
async fn client_of(
    catalog: ToolCatalog,
    options: McpOptions,
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let url = serve(catalog, options).await;
    rmcp::ServiceExt::serve(
        (),
        rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str()),
    )
    .await
    .expect("initialize")
}

async fn serve_with(catalog: ToolCatalog, options: McpOptions, http: HttpOptions) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    tokio::spawn(llm_worker::mcp::serve_http(
        listener, catalog, options, http,
    ));
    url
}

/// `client` connected to the server at `url` as a client of revision 2026-07-28 (no session:
/// each request stands alone).
async fn stateless_client<C: rmcp::service::ClientServiceExt>(
    client: C,
    url: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, C> {
    client
        .serve_with_lifecycle(
            rmcp::transport::StreamableHttpClientTransport::from_uri(url),
            rmcp::service::ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("server/discover")
}

/// An operator's pre-call hook (an approval, say) that tells the test a call reached it, then
/// holds the call until the test lets it go.
struct WaitingHook {
    arrived: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

impl WaitingHook {
    /// The hook, what says a call reached it, and what lets the call go.
    fn new() -> (Self, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
        let (arrived, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let hook = Self {
            arrived: Arc::clone(&arrived),
            release: Arc::clone(&release),
        };
        (hook, arrived, release)
    }
}

#[async_trait]
impl llm_worker::PreToolCallHook for WaitingHook {
    async fn pre_tool_call(
        &self,
        _: &mut llm_worker::ToolCallContext,
    ) -> llm_worker::PreToolCallAction {
        self.arrived.notify_one();
        self.release.notified().await;
        llm_worker::PreToolCallAction::Continue
    }
}

/// Asserts that `answer` (to a request `why` should be refused) is the JSON-RPC error of a
/// quota, saying `says`.
fn assert_over_quota<T: std::fmt::Debug>(
    answer: Result<T, rmcp::ServiceError>,
    says: &str,
    why: &str,
) {
    let refused = answer.expect_err(why);
    let rmcp::ServiceError::McpError(error) = refused else {
        panic!("{why}: not a JSON-RPC error: {refused:?}");
    };
    assert_eq!(error.code.0, llm_worker::mcp::QUOTA_EXCEEDED, "{why}");
    assert!(error.message.contains(says), "{why}: {}", error.message);
}

fn greeting(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// A writer the test reads back (an audit log's, for one).
#[derive(Clone, Default)]
pub(crate) struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    pub(crate) fn records(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().expect("lock").clone();
        String::from_utf8(bytes)
            .expect("UTF-8")
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }
}
