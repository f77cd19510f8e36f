//! The server as an embedder uses it: [`McpServer`](llm_worker::mcp::McpServer) over a
//! transport of the embedder's own, [`McpHttpService`](llm_worker::mcp::McpHttpService) on
//! the embedder's own router, and `serve_http_with_shutdown` stopped when told; sessions'
//! tools are dropped when they end.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use llm_worker::mcp::{HttpOptions, McpOptions, McpServer, ToolCatalog, ToolGroup};
use llm_worker::{Tool, ToolDefinition, ToolError, ToolMeta};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::greeting;

/// A tool that counts how many of its instances were dropped (a session's end).
struct Tracked(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Tracked {
    async fn execute(&self, _input_json: &str) -> Result<String, ToolError> {
        Ok("tracked".into())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn tracked(dropped: &Arc<AtomicUsize>) -> ToolCatalog {
    let dropped = Arc::clone(dropped);
    ToolCatalog::new([ToolGroup::new("tracked", 1, move || {
        let dropped = Arc::clone(&dropped);
        let definition: ToolDefinition = Arc::new(move || {
            let meta = ToolMeta::new("tracked")
                .description("Tracked")
                .input_schema(json!({"type": "object"}));
            (
                meta,
                Arc::new(Tracked(Arc::clone(&dropped))) as Arc<dyn Tool>,
            )
        });
        vec![definition]
    })])
}

/// Waits until `dropped` counts at least one (within the tests' deadline).
async fn until_dropped(dropped: &AtomicUsize) {
    llm_worker_tests::wait::until("the session's tools to be dropped", || {
        dropped.load(Ordering::SeqCst) > 0
    })
    .await;
}

fn authorized(
    url: &str,
    token: &str,
) -> rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig {
    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url)
        .auth_header(token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedder_mounts_the_mcp_service_on_its_own_router_and_stops_it() {
    use http_body_util::BodyExt;
    use llm_worker::mcp::McpHttpService;

    // Mounting never makes it open: no tokens and no opt-out is refused.
    let open = McpHttpService::new(
        ToolCatalog::new([]),
        McpOptions::new("open", "1"),
        HttpOptions::default(),
    );
    assert!(open.is_err());
    // Nor does the loopback opt-out: a mounted service may be reached from anywhere.
    let open = McpHttpService::new(
        ToolCatalog::new([]),
        McpOptions::new("open", "1"),
        HttpOptions::default().no_auth(true),
    );
    assert!(open.is_err());

    let dropped = Arc::new(AtomicUsize::new(0));
    let mcp = McpHttpService::new(
        tracked(&dropped),
        McpOptions::new("mounted", "1"),
        HttpOptions::default().tokens(["embedder-token-0123456789"]),
    )
    .expect("service");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // The embedder's own server and router: `/health` is theirs, `/mcp` is the MCP service.
    let router = mcp.clone();
    let server = tokio::spawn(async move {
        let mut stopped = std::pin::pin!(stopped);
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => accepted.expect("accept").0,
                _ = &mut stopped => break,
            };
            let router = router.clone();
            tokio::spawn(async move {
                let route = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let router = router.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                if request.uri().path() == "/health" {
                                    http::Response::new(
                                        http_body_util::Full::new(bytes::Bytes::from("ok")).boxed(),
                                    )
                                } else {
                                    router.handle(request).await
                                },
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), route)
                    .await;
            });
        }
        // Stopping: the embedder ends the MCP sessions with its own server.
        router.close();
    });

    let url = format!("http://{address}/mcp");
    assert!(
        ().serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str()
        ))
        .await
        .is_err(),
        "no token: refused, mounted or not"
    );
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_config(
            authorized(&url, "embedder-token-0123456789"),
        ))
        .await
        .expect("initialize through the embedder's router");
    let result = client
        .call_tool(CallToolRequestParams::new("tracked"))
        .await
        .expect("call");
    assert_eq!(greeting(&result), "tracked");
    let mut health = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    tokio::io::AsyncWriteExt::write_all(
        &mut health,
        b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await
    .expect("send");
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut health, &mut answer)
        .await
        .expect("read");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
        "{answer}"
    );

    stop.send(()).expect("stop");
    server.await.expect("the embedder's server stopped");
    until_dropped(&dropped).await;
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_http_stops_when_told() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(llm_worker::mcp::serve_http_with_shutdown(
        listener,
        tracked(&dropped),
        McpOptions::new("stoppable", "1"),
        HttpOptions::default().tokens(["stop-token-0123456789abcdef"]),
        async {
            let _ = stopped.await;
        },
    ));
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_config(
            authorized(&format!("http://{address}/"), "stop-token-0123456789abcdef"),
        ))
        .await
        .expect("initialize");
    let result = client
        .call_tool(CallToolRequestParams::new("tracked"))
        .await
        .expect("call");
    assert_eq!(greeting(&result), "tracked");
    stop.send(()).expect("stop");
    server
        .await
        .expect("the server task")
        .expect("serve_http_with_shutdown returns Ok once stopped");
    // The session ended with the server, its tools dropped; nothing listens any more.
    until_dropped(&dropped).await;
    assert!(tokio::net::TcpStream::connect(address).await.is_err());
    drop(client);
}

/// An `McpServer` served over an in-memory duplex, with rmcp's client at the other end, then
/// stopped by its shutdown future: the session ends, and its tools are dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_serves_any_rmcp_transport_and_stops_when_told() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let server = McpServer::new(&tracked(&dropped), McpOptions::new("in-memory", "1"));
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(server_end, async {
        let _ = stopped.await;
    }));
    let client = llm_worker_tests::wait::within("initialize", ().serve(client_end))
        .await
        .expect("initialize");
    let tools = llm_worker_tests::wait::within("tools/list", client.list_all_tools())
        .await
        .expect("tools/list");
    assert_eq!(tools.len(), 1);
    let called = llm_worker_tests::wait::within(
        "tools/call",
        client.call_tool(CallToolRequestParams::new("tracked")),
    )
    .await
    .expect("tools/call");
    assert_eq!(greeting(&called), "tracked");
    assert_eq!(dropped.load(Ordering::SeqCst), 0, "the session is open");

    stop.send(()).expect("the server is serving");
    let served = llm_worker_tests::wait::within("the server to stop", serving).await;
    served.expect("joined").expect("a clean stop");
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the session's tool was dropped"
    );
    // Nothing answers any more: the call fails, or (when rmcp's client has not yet seen the
    // transport close) is never answered.
    let after = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        client.call_tool(CallToolRequestParams::new("tracked")),
    )
    .await;
    assert!(!matches!(after, Ok(Ok(_))), "{after:?}");
}

/// An embedder serving clients over a stream of its own (a Unix socket, a child's pipes) with
/// `McpServer::serve` and rmcp's own transport gets rmcp's bounds only (a line of 16 MiB,
/// parsed whatever it takes). `serve_lines` holds the client to stdio's: a line of many tiny
/// values is refused before it is parsed, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_lines_holds_a_stream_client_to_the_stdio_bounds() {
    use tokio::io::AsyncWriteExt as _;
    let dropped = Arc::new(AtomicUsize::new(0));
    let (client, server) = tokio::io::duplex(1 << 20);
    let (server_input, server_output) = tokio::io::split(server);
    let serving = tokio::spawn(
        McpServer::new(&tracked(&dropped), McpOptions::new("lines", "1")).serve_lines(
            server_input,
            server_output,
            std::future::pending(),
        ),
    );
    let (answers, mut requests) = tokio::io::split(client);
    let mut answers = tokio::io::BufReader::new(answers);
    let heavy = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"tracked","arguments":{{"a":[{}]}}}}}}"#,
        vec![r#"{"":0}"#; 1 << 20].join(",")
    );
    let writing = tokio::spawn(async move {
        for line in [
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            &heavy,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tracked"}}"#,
        ] {
            requests.write_all(line.as_bytes()).await.expect("write");
            requests.write_all(b"\n").await.expect("write");
        }
        requests
    });
    answer(&mut answers, r#""id":0"#).await;
    // The refusal is written by a task of its own, so the next request's answer may come
    // first, as JSON-RPC allows.
    let [refused, called] = answers_to(&mut answers, ["once parsed", r#""id":2"#]).await;
    assert!(
        refused.contains("-32600") && refused.contains("once parsed"),
        "{refused}"
    );
    assert!(called.contains("tracked"), "{called}");
    drop(writing.await);
    serving.abort();
}

/// The lines of `answers` holding each of `texts`, whatever their order.
async fn answers_to<const N: usize>(
    answers: &mut (impl tokio::io::AsyncBufRead + Unpin),
    texts: [&str; N],
) -> [String; N] {
    let mut found: [Option<String>; N] = std::array::from_fn(|_| None);
    while found.iter().any(Option::is_none) {
        let line = answer(answers, "").await;
        if let Some(slot) = texts
            .iter()
            .zip(&mut found)
            .find_map(|(text, slot)| (slot.is_none() && line.contains(text)).then_some(slot))
        {
            *slot = Some(line);
        }
    }
    found.map(|line| line.unwrap_or_default())
}

/// The next line of `answers` holding `text`.
pub(crate) async fn answer(
    answers: &mut (impl tokio::io::AsyncBufRead + Unpin),
    text: &str,
) -> String {
    use tokio::io::AsyncBufReadExt as _;
    loop {
        let mut line = String::new();
        let read = llm_worker_tests::wait::within("an answer", answers.read_line(&mut line))
            .await
            .expect("read");
        assert!(read > 0, "the server closed the stream");
        if line.contains(text) {
            return line;
        }
    }
}
