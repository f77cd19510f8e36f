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

/// A server on 127.0.0.1 that accepts connections, reads the request and never answers; it
/// counts connections accepted and connections the client closed.
struct SilentServer {
    port: u16,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
}

fn silent_server() -> SilentServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("address").port();
    let (accepted, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (accepts, closes) = (Arc::clone(&accepted), Arc::clone(&closed));
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    accepts.fetch_add(1, Ordering::SeqCst);
                    let closes = Arc::clone(&closes);
                    std::thread::spawn(move || {
                        let _ = stream.set_nonblocking(false);
                        let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
                        let mut buffer = [0u8; 4096];
                        // Read until the client closes the connection (0 bytes) or 20 s pass.
                        while let Ok(read) = stream.read(&mut buffer) {
                            if read == 0 {
                                closes.fetch_add(1, Ordering::SeqCst);
                                break;
                            }
                        }
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    SilentServer {
        port,
        accepted,
        closed,
    }
}

/// A plugin that sends requests and returns without waiting for them: the requests are capped
/// in flight, and cancelled when the call that sent them ends — they do not run on between
/// calls, holding connections and host memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_a_call_leaves_behind_are_capped_and_cancelled() {
    let server = silent_server();
    // Waiting for a request still running would end at the time limit.
    let policy = format!(
        "[limits]\ntimeout_ms = 3000\n[http]\nallow = [\"http://127.0.0.1:{}\"]\n",
        server.port
    );
    let tools = session(fetcher_dir("http-fire", Some(policy)));
    let url = format!("http://127.0.0.1:{}/slow", server.port);
    let input = serde_json::json!({ "url": url, "count": 10 }).to_string();
    assert_eq!(
        tools.call_tool("fire", &input).await.as_deref(),
        Ok("sent 10")
    );
    let outcomes = tools
        .call_tool("outcomes", "{}")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let words: Vec<&str> = outcomes.split(' ').collect();
    assert_eq!(words.len(), 10, "{outcomes}");
    assert_eq!(
        words
            .iter()
            .filter(|w| **w == "ConnectionLimitReached")
            .count(),
        2,
        "8 in flight at most: {outcomes}"
    );
    // Ended by the end of the call that sent them, not by a deadline (ConnectionTimeout).
    assert_eq!(
        words.iter().filter(|w| **w == "InternalError").count(),
        8,
        "cancelled when the call ended: {outcomes}"
    );
    // The connections that were opened are closed by the host.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.closed.load(Ordering::SeqCst) < server.accepted.load(Ordering::SeqCst)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let accepted = server.accepted.load(Ordering::SeqCst);
    assert!(accepted <= 8, "{accepted} connections");
    assert_eq!(server.closed.load(Ordering::SeqCst), accepted);
    assert_eq!(tools.call_tool("count", "{}").await.as_deref(), Ok("0"));
}
