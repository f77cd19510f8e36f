//! Outbound HTTP through `wasi:http`: denied unless the policy grants the destination.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use llm_worker::*;
use llm_worker_tests::{host, plugin, plugin_path, scratch_dir};

/// A tiny HTTP server on 127.0.0.1 answering every request with "hello from local"; it
/// counts requests and stops by itself after 20 s.
struct TestServer {
    port: u16,
    hits: Arc<AtomicUsize>,
}

fn test_server() -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("address").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut buffer = [0u8; 4096];
                    let _ = stream.read(&mut buffer);
                    let body = "hello from local";
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    TestServer { port, hits }
}

/// The fetcher plugin in its own directory, with `policy` beside it (if any).
fn fetcher_dir(name: &str, policy: Option<String>) -> PathBuf {
    let dir = scratch_dir(name);
    std::fs::copy(plugin_path("fetcher"), dir.join("fetcher.wasm")).expect("copy");
    if let Some(policy) = policy {
        std::fs::write(dir.join("fetcher.policy.toml"), policy).expect("write policy");
    }
    dir.join("fetcher.wasm")
}

fn session(path: PathBuf) -> ToolServerHandle {
    let loaded = host().load(path).unwrap_or_else(|e| panic!("{e}"));
    let mut worker = Worker::new();
    worker
        .register_tools(loaded.definitions())
        .expect("registers");
    worker
        .register_tools(plugin("counter").definitions())
        .expect("registers");
    worker.tool_server_handle()
}

async fn fetch(tools: &ToolServerHandle, url: &str) -> Result<String, ToolServerError> {
    tools
        .call_tool("fetch", &serde_json::json!({ "url": url }).to_string())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_host_is_reachable() {
    let server = test_server();
    let policy = format!("[http]\nallow = [\"http://127.0.0.1:{}\"]\n", server.port);
    let tools = session(fetcher_dir("http-granted", Some(policy)));
    let url = format!("http://127.0.0.1:{}/weather", server.port);
    assert_eq!(
        fetch(&tools, &url).await.as_deref(),
        Ok("200 hello from local")
    );
    assert_eq!(server.hits.load(Ordering::SeqCst), 1);
    assert_eq!(tools.call_tool("count", "{}").await.as_deref(), Ok("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_not_granted_are_denied_before_any_connection() {
    let server = test_server();
    let other_port = server.port.wrapping_add(1).max(1);
    for policy in [
        None,
        Some(format!(
            "[http]\nallow = [\"http://127.0.0.1:{other_port}\"]\n"
        )),
        Some(format!(
            "[http]\nallow = [\"https://127.0.0.1:{}\"]\n",
            server.port
        )),
        Some("[http]\nallow = [\"*.example.com\"]\n".to_owned()),
    ] {
        let tools = session(fetcher_dir("http-denied", policy.clone()));
        let url = format!("http://127.0.0.1:{}/secret", server.port);
        let denied = fetch(&tools, &url).await;
        assert!(
            matches!(&denied, Err(ToolServerError::ToolExecution(m)) if m.contains("HttpRequestDenied")),
            "{policy:?}: {denied:?}"
        );
        assert_eq!(tools.call_tool("count", "{}").await.as_deref(), Ok("0"));
    }
    assert_eq!(
        server.hits.load(Ordering::SeqCst),
        0,
        "no request reached the server"
    );
}
