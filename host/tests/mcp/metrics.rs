//! Metrics: requests by plugin, target and outcome with their durations, refusals at the
//! gate, live sessions, instances and their memory, in the OpenMetrics text format.

use llm_worker::mcp::{BearerToken, HttpOptions, McpOptions, Metrics, ToolCatalog, ToolGroup};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

const ALICE: &str = "alice-token-0123456789abcdef";

/// The value of the series `name{labels}` in `text`, if it is there.
pub(crate) fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_refusals_sessions_and_instances_are_counted() {
    let notes = llm_worker_tests::plugin("notes");
    let metrics = Metrics::new().host(llm_worker_tests::host());
    let url = crate::serve_with(
        ToolCatalog::new([ToolGroup::plugin(&notes)]),
        McpOptions::new("metered", "1").metrics(metrics.clone()),
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await;

    // Refused at the gate: no token.
    let refused = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("an answer");
    assert_eq!(refused.status(), 401);

    let client = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(ALICE),
        ))
        .await
        .expect("initialize");
    for _ in 0..2 {
        client
            .call_tool(CallToolRequestParams::new("list_notes"))
            .await
            .expect("list_notes");
    }
    // Reads through a template are counted by the template, not by the URI each one named.
    for number in ["1", "2", "3"] {
        let _ = client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
                "notes://note/{number}"
            )))
            .await;
    }
    assert!(
        client
            .call_tool(CallToolRequestParams::new("no_such_tool"))
            .await
            .is_err()
    );

    let text = metrics.render();
    assert_eq!(
        value(
            &text,
            r#"llm_worker_requests_total{event="tools/call",plugin="notes",target="list_notes",outcome="ok"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            r#"llm_worker_request_duration_seconds_count{event="tools/call",plugin="notes",target="list_notes"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            r#"llm_worker_http_refusals_total{reason="unauthenticated"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(value(&text, "llm_worker_sessions"), Some(1.0), "{text}");
    let instances = value(&text, "llm_worker_instances").expect("instances");
    let memory = value(&text, "llm_worker_instance_memory_bytes").expect("memory");
    assert!(instances >= 1.0, "{text}");
    assert!(memory > 0.0, "{text}");
    assert!(text.ends_with("# EOF\n"), "OpenMetrics: {text}");
    let template_reads: f64 = text
        .lines()
        .filter(|line| {
            line.starts_with(r#"llm_worker_requests_total{event="resources/read",plugin="notes",target="notes://note/{number}""#)
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(template_reads, 3.0, "{text}");
    assert!(!text.contains("notes://note/2"), "{text}");
    // A made-up name is no label: clients cannot add series.
    assert!(!text.contains("no_such_tool"), "{text}");
    assert_eq!(
        value(
            &text,
            r#"llm_worker_requests_total{event="tools/call",plugin="",target="",outcome="error"}"#
        ),
        Some(1.0),
        "{text}"
    );
    // Labels never name who asked.
    assert!(!text.contains("alice"), "{text}");

    client.cancel().await.expect("close");
}

/// A resource a plugin lists only while serving (lists often hold what clients created: a
/// note's title, a file's name) names no series: its reads are counted under no target, and
/// its URI never shows in the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_listed_while_serving_names_no_series() {
    let forger = llm_worker_tests::plugin("forger");
    let metrics = Metrics::new();
    let url = crate::serve_with(
        ToolCatalog::new([ToolGroup::plugin(&forger)]),
        McpOptions::new("metered", "1").metrics(metrics.clone()),
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await;
    let client = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(ALICE),
        ))
        .await
        .expect("initialize");
    // From now on the forger's list names notes://all, which no plugin offered at load.
    client
        .call_tool(CallToolRequestParams::new("claim"))
        .await
        .expect("claim");
    let listed = client.list_all_resources().await.expect("resources/list");
    assert!(listed.iter().any(|resource| resource.uri == "notes://all"));
    for uri in ["notes://all", "forger://own"] {
        client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
            .unwrap_or_else(|e| panic!("read {uri}: {e}"));
    }
    let text = metrics.render();
    assert!(!text.contains("notes://all"), "{text}");
    assert_eq!(
        value(
            &text,
            r#"llm_worker_requests_total{event="resources/read",plugin="forger",target="",outcome="ok"}"#
        ),
        Some(1.0),
        "{text}"
    );
    // What it offered at load is named.
    assert_eq!(
        value(
            &text,
            r#"llm_worker_requests_total{event="resources/read",plugin="forger",target="forger://own",outcome="ok"}"#
        ),
        Some(1.0),
        "{text}"
    );
    client.cancel().await.expect("close");
}

/// Sends `request` (a whole HTTP/1.0 request) on `stream` and reads the answer's status line.
async fn status_of(stream: &mut tokio::net::TcpStream, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    answer.lines().next().unwrap_or_default().to_owned()
}

/// The metrics port answered any `Host` and any web page, and served connections without
/// bound: a page whose name was rebound to 127.0.0.1 could read which plugins and tools are
/// served and when they are used, and another user could hold every file descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_not_served_to_web_pages_or_without_bound() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(llm_worker::mcp::serve_metrics(listener, Metrics::new()));
    let get =
        |host: &str, extra: &str| format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n{extra}\r\n");
    let connect = || tokio::net::TcpStream::connect(address);
    let own = address.to_string();
    for (host, extra, expected) in [
        (own.as_str(), "", "200"),
        (&format!("localhost:{}", address.port()), "", "200"),
        (&format!("evil.example:{}", address.port()), "", "403"),
        (own.as_str(), "Origin: http://evil.example\r\n", "403"),
        (own.as_str(), "Sec-Fetch-Site: same-origin\r\n", "403"),
        // A URL the user typed in a browser.
        (own.as_str(), "Sec-Fetch-Site: none\r\n", "200"),
    ] {
        let mut stream = connect().await.expect("connect");
        let status = status_of(&mut stream, &get(host, extra)).await;
        assert!(status.contains(expected), "{host} {extra:?}: {status}");
    }
    // Connections past the cap wait to be accepted: the next request is answered once one of
    // the idle connections goes.
    let mut idle = Vec::new();
    for _ in 0..llm_worker::mcp::MAX_METRICS_CONNECTIONS {
        idle.push(connect().await.expect("connect"));
    }
    let mut waiting = connect().await.expect("queued by the system");
    let waited = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        status_of(&mut waiting, &get(&own, "")),
    )
    .await;
    assert!(waited.is_err(), "served past the cap: {waited:?}");
    drop(idle.pop());
    let mut stream = connect().await.expect("connect");
    drop(idle);
    let status = status_of(&mut stream, &get(&own, "")).await;
    assert!(status.contains("200"), "{status}");
    // Every place taken by a connection sending thousands of pipelined requests and not
    // reading the answers: each gets one answer and is closed, so a scraper is still served
    // (they were all answered, in turn, and a client that never read held its place).
    let pipelined = format!("GET /metrics HTTP/1.1\r\nHost: {own}\r\n\r\n").repeat(2_000);
    let mut greedy = Vec::new();
    for _ in 0..llm_worker::mcp::MAX_METRICS_CONNECTIONS {
        let (mut reader, mut writer) = connect().await.expect("connect").into_split();
        let pipelined = pipelined.clone();
        // The server may close it (reset, with requests unread) before all is sent.
        tokio::spawn(async move {
            let _ = tokio::io::AsyncWriteExt::write_all(&mut writer, pipelined.as_bytes()).await;
            // Kept open until the server closes it.
            std::future::pending::<()>().await;
        });
        greedy.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            let mut chunk = [0u8; 65536];
            while let Ok(read @ 1..) = tokio::io::AsyncReadExt::read(&mut reader, &mut chunk).await
            {
                answers.extend_from_slice(&chunk[..read]);
            }
            String::from_utf8_lossy(&answers)
                .matches("HTTP/1.1 ")
                .count()
        }));
    }
    let mut scraper = connect().await.expect("connect");
    let status = llm_worker_tests::wait::within(
        "the scraper's answer",
        status_of(&mut scraper, &get(&own, "")),
    )
    .await;
    assert!(status.contains("200"), "{status}");
    for connection in greedy {
        let answered = llm_worker_tests::wait::within("the connection's end", connection)
            .await
            .expect("joins");
        assert_eq!(answered, 1, "one answer a connection");
    }
    server.abort();
}
