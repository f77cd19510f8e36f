//! Authentication: serving without tokens is an explicit opt-out on loopback, and a persistent
//! token is kept private.

use llm_worker::mcp::{HttpOptions, McpHttpService, McpOptions, ToolCatalog};

use crate::counters;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_without_tokens_needs_an_explicit_opt_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let refused = llm_worker::mcp::serve_http(
        listener,
        ToolCatalog::new([counters("all", 1, &["a"])]),
        McpOptions::new("open", "1"),
        HttpOptions::default(),
    )
    .await;
    let error = refused.expect_err("no tokens and no opt-out");
    assert!(
        matches!(error, llm_worker::mcp::McpError::NoAuthentication { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("no_auth"), "{error}");

    // The opt-out is for loopback only.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
        .await
        .expect("bind");
    let refused = llm_worker::mcp::serve_http(
        listener,
        ToolCatalog::new([counters("all", 1, &["a"])]),
        McpOptions::new("open", "1"),
        HttpOptions::default().no_auth(true),
    )
    .await;
    assert!(matches!(
        refused,
        Err(llm_worker::mcp::McpError::NoAuthentication { .. })
    ));
}

#[test]
fn a_persistent_token_is_kept_private_and_reused() {
    let dir = llm_worker_tests::scratch_dir("persistent-token");
    let path = dir.join("state").join("http-token");
    let first = llm_worker::mcp::persistent_token(&path).expect("generated");
    assert_eq!(first.len(), 64);
    assert_eq!(
        llm_worker::mcp::persistent_token(&path).expect("read again"),
        first,
        "a restarted server keeps its clients' token"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let parent = std::fs::metadata(dir.join("state"))
            .expect("dir")
            .permissions()
            .mode();
        assert_eq!(parent & 0o777, 0o700);
        // Readable by others: refused, not used.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let error = llm_worker::mcp::persistent_token(&path).expect_err("readable by others");
        assert!(error.to_string().contains("chmod 600"), "{error}");
        // A link planted under its name: refused, not followed.
        let planted = dir.join("planted");
        std::fs::write(dir.join("attacker-token"), "attacker\n").expect("write");
        std::fs::set_permissions(
            dir.join("attacker-token"),
            std::fs::Permissions::from_mode(0o600),
        )
        .expect("chmod");
        std::os::unix::fs::symlink(dir.join("attacker-token"), &planted).expect("link");
        let error = llm_worker::mcp::persistent_token(&planted).expect_err("a link");
        assert!(error.to_string().contains("link"), "{error}");
    }
    // A token written there by hand, too short to be a secret: refused, not served.
    let short = dir.join("short-token");
    write_private(&short, "hunter2\n");
    let error = llm_worker::mcp::persistent_token(&short).expect_err("too short");
    assert!(
        error.to_string().contains("7 characters") && error.to_string().contains("delete"),
        "{error}"
    );
    write_private(&short, "hunter2 hunter2 hunter2\n");
    let error = llm_worker::mcp::persistent_token(&short).expect_err("spaces");
    assert!(error.to_string().contains("with spaces"), "{error}");
}

/// A file only this user may read (as a token file must be).
fn write_private(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).expect("write");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
}

/// A token given through the library, not a file, is held to the same length as a token
/// file's: a made-up one is refused when the service is made, naming whose it is.
#[test]
fn a_token_too_short_to_be_a_secret_is_refused_however_it_is_given() {
    let refused = McpHttpService::new(
        ToolCatalog::new([]),
        McpOptions::new("weak", "1"),
        HttpOptions::default().named_tokens([
            llm_worker::mcp::BearerToken::new("ops", "ops-token-0123456789abcdef"),
            llm_worker::mcp::BearerToken::new("alice", "alice"),
        ]),
    );
    match refused {
        Err(llm_worker::mcp::McpError::WeakToken { name, chars }) => {
            assert_eq!((name.as_str(), chars), ("alice", 5));
        }
        other => panic!("expected WeakToken, got {:?}", other.map(|_| ())),
    }
    // Spaces around it are not part of it (the token is compared without them).
    let padded = McpHttpService::new(
        ToolCatalog::new([]),
        McpOptions::new("padded", "1"),
        HttpOptions::default().named_tokens([llm_worker::mcp::BearerToken::new(
            "bob",
            "hunter2          ",
        )]),
    );
    assert!(
        matches!(
            padded,
            Err(llm_worker::mcp::McpError::WeakToken { chars: 7, .. })
        ),
        "a short token padded with spaces"
    );
    McpHttpService::new(
        ToolCatalog::new([]),
        McpOptions::new("strong", "1"),
        HttpOptions::default().tokens(["a".repeat(llm_worker::mcp::MIN_TOKEN_CHARS)]),
    )
    .expect("a token of the minimum length is served");
}

/// A client with a token trickling its request's body held its connection (and a place among
/// the server's connections) for as long as it liked: rmcp reads a body with no time limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_arrive_in_time_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const TOKEN: &str = "slow-token-0123456789abcdef";
    let url = crate::serve_with(
        ToolCatalog::from_plugins([&llm_worker_tests::plugin("counter")]),
        McpOptions::new("slow", "1"),
        HttpOptions::default()
            .tokens([TOKEN])
            .body_timeout(std::time::Duration::from_secs(1)),
    )
    .await;
    let authority = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    // Headers promising 1,000 bytes, then the first few, then nothing.
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: 1000\r\n\r\n{{\"jsonrpc\""
    );
    stream.write_all(head.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut buffer = [0; 1024];
        while !String::from_utf8_lossy(&answer).contains("did not arrive") {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => answer.extend_from_slice(&buffer[..read]),
            }
        }
    })
    .await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(read.is_ok(), "no answer: {answer}");
    assert!(
        answer.starts_with("HTTP/1.1 408")
            && answer.contains("the request's body did not arrive within 1s of its headers"),
        "{answer}"
    );
}
