//! `serve --http` as an OAuth resource server, against a real authorization server and a real
//! MCP client: `oidc-provider` (npm, OpenID Certified) issues JWT access tokens for the
//! server's resource, and the official TypeScript SDK's client finds it through the server's
//! 401 and Protected Resource Metadata, gets a token (client credentials) and calls a tool.
//!
//! The two npm packages are installed, pinned, once per target directory (under
//! `CARGO_TARGET_TMPDIR`). Without Node and npm the test says so and passes, except under CI
//! (`CI` set), where that is a failure.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use super::Server;

/// The authorization server, pinned.
const OIDC_PROVIDER: &str = "oidc-provider@9.13.3";
/// The MCP client, pinned.
const MCP_SDK: &str = "@modelcontextprotocol/sdk@1.32.2";

const CLIENT_SECRET: &str = "client-secret-0123456789abcdef0123456789";

/// Where the packages are installed, with the test's scripts beside them; `None` (and said)
/// where npm cannot install them.
fn installed() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("oauth-node");
    let stamp = dir.join(format!(
        "installed-{OIDC_PROVIDER}-{}",
        MCP_SDK.replace('/', "_")
    ));
    if !stamp.exists() {
        std::fs::create_dir_all(&dir).expect("mkdir");
        let status = std::process::Command::new("npm")
            .args([
                "install",
                // No package's install scripts run (none of these packages has any).
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "--prefix",
            ])
            .arg(&dir)
            .args([OIDC_PROVIDER, MCP_SDK])
            .stdout(Stdio::null())
            .status();
        if !status.is_ok_and(|status| status.success()) {
            let why = "npm could not install oidc-provider and the MCP TypeScript SDK";
            if std::env::var_os("CI").is_some() {
                panic!("{why}, and CI is set");
            }
            eprintln!("SKIPPED: {why}");
            return None;
        }
        std::fs::write(&stamp, "").expect("stamp");
    }
    // The scripts go beside node_modules, where their imports resolve.
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/command/http/oauth");
    for script in ["provider.mjs", "client.mjs"] {
        std::fs::copy(here.join(script), dir.join(script)).expect("copy a script");
    }
    Some(dir)
}

/// A free loopback port (given back before its user takes it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_gets_a_token_from_a_real_authorization_server_and_calls_a_tool() {
    let Some(node) = tokio::task::spawn_blocking(installed)
        .await
        .expect("install")
    else {
        return;
    };
    let (issuer_port, server_port) = (free_port(), free_port());
    let resource = format!("http://127.0.0.1:{server_port}/");
    let mut provider = tokio::process::Command::new("node")
        .arg(node.join("provider.mjs"))
        .env("PORT", issuer_port.to_string())
        .env("RESOURCE", &resource)
        .env("CLIENT_SECRET", CLIENT_SECRET)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node");
    let mut lines = tokio::io::BufReader::new(provider.stdout.take().expect("stdout")).lines();
    let issuer = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(issuer) = line.strip_prefix("issuer ") {
                return issuer.to_owned();
            }
        }
        panic!("the authorization server ended before it listened");
    })
    .await
    .expect("the authorization server to listen");

    let audit = llm_worker_tests::scratch_dir("oauth-audit");
    let audit_log = audit.join("audit.jsonl");
    // A proxy nobody listens on, in every variable a client reads: the server's fetches from a
    // loopback issuer (its keys, its metadata) never go through a proxy, which would choose the
    // keys the server trusts (and see loopback traffic it has no business with).
    let dead_proxy = "http://127.0.0.1:1";
    let proxies = [
        ("HTTP_PROXY", dead_proxy),
        ("HTTPS_PROXY", dead_proxy),
        ("ALL_PROXY", dead_proxy),
        ("http_proxy", dead_proxy),
        ("https_proxy", dead_proxy),
        ("all_proxy", dead_proxy),
        ("NO_PROXY", ""),
        ("no_proxy", ""),
    ];
    let server = Server::try_start_full(
        "http-oauth",
        &["counter"],
        &[],
        &proxies,
        &format!("127.0.0.1:{server_port}"),
        &[
            "--oauth-issuer",
            &issuer,
            "--oauth-resource",
            &resource,
            "--oauth-scope",
            "mcp:tools",
            "--audit-log",
            audit_log.to_str().expect("utf-8"),
        ],
    )
    .await
    .unwrap_or_else(|stderr| panic!("the server did not start: {stderr}"));

    let client = tokio::process::Command::new("node")
        .arg(node.join("client.mjs"))
        .env("SERVER_URL", &resource)
        .env("ISSUER", &issuer)
        .env("CLIENT_SECRET", CLIENT_SECRET)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), client)
        .await
        .expect("the client to finish")
        .expect("node");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(said.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {said}"));
    assert_eq!(seen["tools"], serde_json::json!(["count", "peek"]));
    assert_eq!(seen["counts"], serde_json::json!(["0", "1"]));
    // The token the client got is one for this server, from this issuer.
    let token = seen["token"].as_str().expect("a token");
    let claims = token.split('.').nth(1).expect("a JWT");
    let claims: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, claims)
            .expect("base64"),
    )
    .expect("claims");
    assert_eq!(claims["aud"], resource.as_str());
    assert_eq!(claims["iss"], issuer.as_str());

    // The audit log names the client as the issuer identified it.
    let records = std::fs::read_to_string(&audit_log).expect("the audit log");
    let first: Value =
        serde_json::from_str(records.lines().next().expect("a record")).expect("JSON");
    assert_eq!(first["identity"], "mcp-client");
    assert_eq!(first["issuer"], issuer.as_str());
    assert_eq!(first["target"], "count");
    server.stop().await;
    let _ = provider.kill().await;
}
