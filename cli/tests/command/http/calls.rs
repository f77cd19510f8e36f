//! A call in flight: progress notifications, and cancellation that stops the call and resets
//! its instance.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use llm_worker_tests::wait::until;
use rmcp::ServiceExt;
use rmcp::service::RoleClient;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;

use super::Server;
use crate::mcp::{call, text};

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
        // Contract 0.3.0: a call dropped by its caller resets the instance.
        &["sleeper@0.3", "counter"],
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

/// The four reference plugins, with the policies they ship, serve over HTTP as over stdio:
/// one session lists all their tools and uses each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_plugins_serve_over_http_with_their_policies() {
    let policy = |name: &str| {
        let path = llm_worker_tests::repo_root().join(format!("plugins/{name}/{name}.policy.toml"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let (fetch, memory, filesystem, time) = (
        policy("fetch"),
        policy("memory"),
        policy("filesystem"),
        policy("time"),
    );
    let server = Server::try_start_with(
        "http-reference",
        &["fetch", "memory", "filesystem", "time"],
        &[
            ("fetch.policy.toml", &fetch),
            ("memory.policy.toml", &memory),
            ("filesystem.policy.toml", &filesystem),
            ("time.policy.toml", &time),
            ("../memory-data/.keep", ""),
            ("../filesystem-data/hello.txt", "hello over HTTP"),
        ],
        "127.0.0.1:0",
        &[],
    )
    .await
    .unwrap_or_else(|stderr| panic!("the server did not start: {stderr}"));
    let client = super::connect(&server.url, server.token.as_deref())
        .await
        .expect("initialize");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(
        tools.len(),
        14 + 9 + 1 + 2,
        "{:?}",
        crate::mcp::names(tools)
    );
    let read = client
        .call_tool(call("read_text_file", json!({"path": "/data/hello.txt"})))
        .await
        .expect("read_text_file");
    assert_eq!(text(&read), "hello over HTTP");
    let created = client
        .call_tool(call(
            "create_entities",
            json!({"entities": [{"name": "Ada", "entityType": "person", "observations": []}]}),
        ))
        .await
        .expect("create_entities");
    assert_ne!(created.is_error, Some(true), "{}", text(&created));
    let converted = client
        .call_tool(call(
            "convert_time",
            json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
        ))
        .await
        .expect("convert_time");
    assert!(text(&converted).contains("+09:00"), "{}", text(&converted));
    let refused = client
        .call_tool(call("fetch", json!({"url": "http://127.0.0.1:9/"})))
        .await
        .expect("fetch");
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text(&refused).contains("not among the hosts this plugin may reach"),
        "{}",
        text(&refused)
    );
    client.cancel().await.expect("close");
}
