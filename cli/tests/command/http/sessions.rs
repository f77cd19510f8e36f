//! MCP sessions over HTTP: each with its own plugin state, capped and expiring, none for
//! stateless clients, and every one told of a `--watch` reload.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use llm_worker_tests::wait::within;
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;

use super::{INITIALIZE, Server, connect, count, raw_post};
use crate::mcp::deploy;
use crate::mcp::{call, text};
use serde_json::json;

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
    // A request that reaches rmcp while it is still removing the ended session is answered
    // 500 rather than 404 (rmcp's race, under load): the client's next request opens a new
    // session all the same.
    let after = match first.call_tool(call("count", json!({}))).await {
        Ok(result) => text(&result),
        Err(error) => {
            assert!(format!("{error:?}").contains("500"), "{error:?}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            count(&first).await
        }
    };
    assert_eq!(after, "0", "the expired session's state is gone");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_clients_get_a_fresh_session_per_request() {
    let server = Server::start("http-stateless", &["counter"], "127.0.0.1:0", &[]).await;
    let client = server.stateless_client().await;
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
        let watcher = crate::mcp::Watcher::default();
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

/// SEP-2243 (revision 2026-07-28): a plugin's tool whose input schema marks an argument with
/// `x-mcp-header` gets it as an `Mcp-Param-*` header too, for intermediaries to route on; a
/// request whose header is missing or says something else than its body is refused before
/// any plugin code runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_param_headers_must_say_what_the_body_says() {
    let server = Server::start("http-param-headers", &["conformance"], "127.0.0.1:0", &[]).await;
    let client = server.stateless_client().await;
    // rmcp's client learns from the list which arguments travel as headers, and sends them.
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|tool| tool.name == "test_x_mcp_header"));
    let call_it = || {
        client.call_tool(crate::mcp::call(
            "test_x_mcp_header",
            serde_json::json!({"region": "eu"}),
        ))
    };
    // The list says `ttlMs: 0`: rmcp's client may find it stale by the time it calls (a
    // millisecond later), and then sends no header (refused, -32020); listing again just
    // before the call tells it anew, a few times at most.
    let mut attempts = 0;
    let called = loop {
        match call_it().await {
            Ok(called) => break called,
            Err(error) => {
                assert!(format!("{error:?}").contains("-32020"), "{error:?}");
                attempts += 1;
                assert!(
                    attempts < 10,
                    "still refused after listing again: {error:?}"
                );
                client.list_all_tools().await.expect("tools/list");
            }
        }
    };
    assert_eq!(crate::mcp::text(&called), "region: eu");
    client.cancel().await.expect("close");

    let body = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test_x_mcp_header","arguments":{"region":"eu"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let authorization = server.authorization();
    let headers = |region: Option<&'static str>| {
        let mut headers = vec![
            authorization.clone(),
            "MCP-Protocol-Version: 2026-07-28".to_owned(),
            "Mcp-Method: tools/call".to_owned(),
            "Mcp-Name: test_x_mcp_header".to_owned(),
        ];
        headers.extend(region.map(|region| format!("Mcp-Param-Region: {region}")));
        headers
    };
    let post = |headers: Vec<String>| {
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        raw_post(server.authority(), &headers, body)
    };
    let (status, answer) = post(headers(Some("eu")));
    assert!(status.contains("200"), "{status} {answer}");
    assert!(answer.contains("region: eu"), "{answer}");
    for (region, why) in [(Some("us"), "does not match"), (None, "Mcp-Param-Region")] {
        let (status, answer) = post(headers(region));
        assert!(status.contains("400"), "{region:?}: {status} {answer}");
        assert!(answer.contains(why), "{region:?}: {answer}");
        assert!(!answer.contains("region: "), "{answer}");
    }
    server.stop().await;
}
