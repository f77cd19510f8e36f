//! Who is let in: bearer tokens off loopback and the generated one on it, `--no-auth`, the
//! Origin and Host checks, the bounds on request bodies; and a listen address given by name.

use std::io::{Read, Write};

use llm_worker_tests::scratch_dir;

use super::{INITIALIZE, Server, connect, count, raw_post};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_the_server_needs_tokens() {
    let refused = Server::try_start("http-no-token", &["counter"], "0.0.0.0:0", &[]).await;
    let said = refused.err().expect("refused without tokens");
    assert!(
        said.contains("without authentication") && said.contains("--token-file"),
        "{said}"
    );

    let tokens_dir = scratch_dir("http-token-file");
    let tokens = tokens_dir.join("tokens");
    std::fs::write(
        &tokens,
        "# the team's tokens\nfirst-secret-token\n\nsecond-secret-token\n",
    )
    .expect("tokens");
    // A token file others can read is refused (it used to be only warned about).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let refused = Server::try_start(
            "http-token-readable",
            &["counter"],
            "0.0.0.0:0",
            &["--token-file", tokens.to_str().expect("utf-8")],
        )
        .await;
        let said = refused.err().expect("refused: others can read the tokens");
        assert!(
            said.contains("other users may read or write it") && said.contains("chmod 600"),
            "{said}"
        );
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let server = Server::start(
        "http-token",
        &["counter"],
        "0.0.0.0:0",
        &["--token-file", tokens.to_str().expect("utf-8")],
    )
    .await;
    // The server listens on every interface; talk to it on loopback.
    let port = server
        .authority()
        .rsplit(':')
        .next()
        .expect("port")
        .to_owned();
    let (authority, url) = (
        format!("127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}/"),
    );
    let (status, rest) = raw_post(&authority, &[], INITIALIZE);
    assert!(status.contains("401"), "{status}");
    assert!(
        rest.to_ascii_lowercase()
            .contains("www-authenticate: bearer realm=\"llm-worker\""),
        "{rest}"
    );
    let (status, _) = raw_post(
        &authority,
        &["Authorization: Bearer first-secret-tokeN"],
        INITIALIZE,
    );
    assert!(status.contains("401"), "a near miss is refused: {status}");
    assert!(connect(&url, None).await.is_err());
    for token in ["first-secret-token", "second-secret-token"] {
        let client = connect(&url, Some(token)).await.expect("admitted");
        assert_eq!(count(&client).await, "0");
        client.cancel().await.expect("close");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_loopback_other_users_need_the_generated_token() {
    let server = Server::start("http-loopback-token", &["counter"], "127.0.0.1:0", &[]).await;
    let token = server
        .token
        .clone()
        .expect("a token was generated and kept");
    assert_eq!(token.len(), 64, "256 random bits in hex: {token}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let file = server
            .dir()
            .parent()
            .expect("root")
            .join("state/llm-worker/http-token");
        let mode = std::fs::metadata(&file)
            .expect("token file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "only the user may read it: {mode:o}");
    }
    // Its stderr is a pipe here (a service manager's log, a container's): it says where the
    // token is kept, not the token.
    assert!(
        server.startup.contains("Bearer TOKEN") && !server.startup.contains(&token),
        "{}",
        server.startup
    );
    // Another local user, without the token: refused, as off loopback.
    let (status, rest) = raw_post(server.authority(), &[], INITIALIZE);
    assert!(status.contains("401"), "{status}");
    assert!(rest.contains("bearer token"), "{rest}");
    assert!(connect(&server.url, None).await.is_err());
    assert!(connect(&server.url, Some("not-the-token")).await.is_err());
    let client = server.client().await;
    assert_eq!(count(&client).await, "0");
    client.cancel().await.expect("close");
    server.stop().await;

    // The explicit opt-out, on loopback only.
    let open = Server::start("http-no-auth", &["counter"], "127.0.0.1:0", &["--no-auth"]).await;
    assert!(open.token.is_none(), "no token is generated with --no-auth");
    let client = connect(&open.url, None)
        .await
        .expect("admitted without a token");
    assert_eq!(count(&client).await, "0");
    client.cancel().await.expect("close");
    open.stop().await;
    let refused = Server::try_start(
        "http-no-auth-off",
        &["counter"],
        "0.0.0.0:0",
        &["--no-auth"],
    )
    .await
    .err()
    .expect("--no-auth is refused off loopback");
    assert!(
        refused.contains("--no-auth") && refused.contains("loopback"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_and_hosts_are_checked() {
    let server = Server::start("http-origin", &["counter"], "127.0.0.1:0", &[]).await;
    let token = server.authorization();
    for headers in [
        vec!["Origin: https://evil.example"],
        vec!["Origin: https://evil.example", &token],
    ] {
        let (status, _) = raw_post(server.authority(), &headers, INITIALIZE);
        assert!(
            status.contains("403"),
            "a web page of another origin, with or without the token: {status}"
        );
    }
    // The server's own origin is not a foreign one (a page it serves, the conformance suite).
    let port = server
        .authority()
        .rsplit(':')
        .next()
        .expect("port")
        .to_owned();
    let own = format!("Origin: http://{}", server.authority());
    let (status, _) = raw_post(server.authority(), &[&own, &token], INITIALIZE);
    assert!(status.contains("200"), "same origin: {status}");
    let mut stream = std::net::TcpStream::connect(server.authority()).expect("connect");
    let request = format!(
        "POST / HTTP/1.1\r\nHost: localhost:{port}\r\nOrigin: http://localhost:{port}\r\n{token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "localhost's own origin: {response}"
    );
    // Reached at 127.0.0.1, the server's origin may be named with localhost: one port of the
    // loopback interface is one server.
    let alias = format!("Origin: http://localhost:{port}");
    let (status, _) = raw_post(server.authority(), &[&alias, &token], INITIALIZE);
    assert!(status.contains("200"), "localhost on 127.0.0.1: {status}");
    // Another port of the same host is another origin.
    let other = format!(
        "Origin: http://127.0.0.1:{}",
        port.parse::<u16>().expect("port") ^ 1
    );
    let (status, _) = raw_post(server.authority(), &[&other, &token], INITIALIZE);
    assert!(status.contains("403"), "another port: {status}");
    // A DNS-rebinding page reaches the server under its own name.
    let mut stream = std::net::TcpStream::connect(server.authority()).expect("connect");
    let request = format!(
        "POST / HTTP/1.1\r\nHost: evil.example\r\n{token}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(
        response.starts_with("HTTP/1.1 403"),
        "a rebound Host, with the token: {response}"
    );
    // Request bodies are bounded.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(5 << 20)
    );
    let (status, _) = raw_post(server.authority(), &[&server.authorization()], &huge);
    assert!(status.contains("413"), "{status}");
    server.stop().await;
}

/// `--max-body-kib` bounds a request's bytes, and 16 times it what its JSON may take once
/// parsed: a body of tiny objects within the byte limit is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_bounds_request_bodies() {
    let server = Server::start(
        "http-body-limits",
        &["counter"],
        "127.0.0.1:0",
        &["--max-body-kib", "1", "--request-memory-mib", "1"],
    )
    .await;
    let refused = Server::try_start(
        "http-body-limits-memory",
        &["counter"],
        "127.0.0.1:0",
        &["--max-body-kib", "1024", "--request-memory-mib", "2"],
    )
    .await;
    let said = refused
        .err()
        .expect("refused: too little memory for four bodies");
    assert!(said.contains("less than four times"), "{said}");
    let token = server.authorization();
    let (status, _) = raw_post(server.authority(), &[&token], INITIALIZE);
    assert!(status.contains("200"), "{status}");
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(1100)
    );
    let (status, rest) = raw_post(server.authority(), &[&token], &long);
    assert!(
        status.contains("413") && rest.contains("larger than this server's limit of 1024 bytes"),
        "{status} {rest}"
    );
    let small_values = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":[{}]}}}}"#,
        vec![r#"{"":0}"#; 120].join(",")
    );
    assert!(small_values.len() < 1024);
    let (status, rest) = raw_post(server.authority(), &[&token], &small_values);
    assert!(
        status.contains("413") && rest.contains("once parsed"),
        "{status} {rest}"
    );
    server.stop().await;
}

/// The attack: a plugin whose policy grants (read-only) the directory of the server's token
/// file reads every client's token, and with an HTTP grant sends them out. It is refused at
/// load, saying why; the other plugins serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_granted_the_servers_secrets_is_refused() {
    let secrets = scratch_dir("http-secrets-granted");
    let tokens = secrets.join("tokens");
    std::fs::write(&tokens, "alice: alice-token-0123456789abcdef\n").expect("tokens");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let policy = format!(
        "[[dirs]]\nhost = {:?}\nguest = \"/secrets\"\nmode = \"ro\"\n",
        secrets.to_str().expect("utf-8")
    );
    let server = Server::try_start_with(
        "http-secrets-granted-server",
        &["counter", "greet"],
        &[("greet.policy.toml", &policy)],
        "127.0.0.1:0",
        &["--token-file", tokens.to_str().expect("utf-8")],
    )
    .await
    .unwrap_or_else(|said| panic!("the server did not start: {said}"));
    assert!(
        server.startup.contains("greet")
            && server.startup.contains("tokens")
            && server.startup.contains("no plugin may read or replace"),
        "{}",
        server.startup
    );
    let (status, _) = raw_post(
        server.authority(),
        &["Authorization: Bearer alice-token-0123456789abcdef"],
        INITIALIZE,
    );
    assert!(status.contains("200"), "the others serve: {status}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_is_resolved() {
    let server = Server::start("http-localhost", &["counter"], "localhost:0", &[]).await;
    let client = server.client().await;
    assert_eq!(count(&client).await, "0");
    client.cancel().await.expect("close");
    server.stop().await;
}
