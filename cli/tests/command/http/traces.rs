//! `serve --otlp-endpoint URL`: a span per tool call reaches an OTLP/HTTP receiver (the
//! test's), continuing the trace the client sent in `_meta.traceparent` or the `traceparent`
//! header.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use rmcp::model::RequestMetaObject;

use super::{INITIALIZE, Server, raw_post};

/// An OTLP/HTTP receiver on loopback: the spans of every `POST /v1/traces`.
async fn receiver() -> (String, Arc<Mutex<Vec<Span>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let spans = Arc::new(Mutex::new(Vec::new()));
    let received = Arc::clone(&spans);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let received = Arc::clone(&received);
            let service =
                hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let received = Arc::clone(&received);
                    async move {
                        let path = request.uri().path().to_owned();
                        let body = request
                            .into_body()
                            .collect()
                            .await
                            .expect("a body")
                            .to_bytes();
                        if path == "/v1/traces" {
                            let export =
                                ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                            let mut spans = received.lock().expect("lock");
                            for resource in export.resource_spans {
                                for scope in resource.scope_spans {
                                    spans.extend(scope.spans);
                                }
                            }
                        }
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::new())))
                    }
                });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    (url, spans)
}

/// The span called `name`, once the collector has it.
async fn span_named(spans: &Mutex<Vec<Span>>, name: &str) -> Span {
    llm_worker_tests::wait::eventually(&format!("the span {name:?} to reach the collector"), || {
        std::future::ready(
            spans
                .lock()
                .expect("lock")
                .iter()
                .find(|span| span.name == name)
                .cloned(),
        )
    })
    .await
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_is_a_span_of_the_clients_trace() {
    let (collector, spans) = receiver().await;
    let server = Server::start_with_env(
        "http-traces",
        &["counter"],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
        &["--otlp-endpoint", &collector],
    )
    .await;
    let client = server.client().await;
    let mut call = rmcp::model::CallToolRequestParams::new("count");
    let mut meta = RequestMetaObject::default();
    meta.set_traceparent(format!("00-{TRACE}-{PARENT}-01"));
    call.meta = Some(meta);
    client.call_tool(call).await.expect("a call");
    client.cancel().await.expect("close");

    let span = span_named(&spans, "tools/call count").await;
    assert_eq!(hex(&span.trace_id), TRACE, "the client's trace");
    assert_eq!(
        hex(&span.parent_span_id),
        PARENT,
        "the client's span is its parent"
    );
    let attribute = |key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .map(|value| format!("{:?}", value.value))
            .unwrap_or_default()
    };
    assert!(attribute("mcp.method.name").contains("tools/call"));
    assert!(attribute("gen_ai.tool.name").contains("count"));
    assert!(attribute("llm_worker.plugin").contains("counter"));
    assert!(attribute("llm_worker.outcome").contains("ok"));
    assert!(!attribute("mcp.session.id").is_empty());

    // The `traceparent` header, for a request without `_meta`'s.
    let authority = server.authority().to_owned();
    let authorization = server.authorization();
    let (status, head) = raw_post(&authority, &[&authorization], INITIALIZE);
    assert!(status.contains("200"), "{status}");
    let session = llm_worker_tests::header_in(&head, "mcp-session-id").expect("a session id");
    let session = format!("Mcp-Session-Id: {session}");
    let version = "Mcp-Protocol-Version: 2025-06-18";
    raw_post(
        &authority,
        &[&authorization, &session, version],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    const HEADER_PARENT: &str = "1111111111111111";
    let traceparent = format!("traceparent: 00-{TRACE}-{HEADER_PARENT}-01");
    let (status, _) = raw_post(
        &authority,
        &[&authorization, &session, version, &traceparent],
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"peek","arguments":{}}}"#,
    );
    assert!(status.contains("200"), "{status}");
    let span = span_named(&spans, "tools/call peek").await;
    assert_eq!(hex(&span.trace_id), TRACE);
    assert_eq!(hex(&span.parent_span_id), HEADER_PARENT);
    server.stop().await;
}
