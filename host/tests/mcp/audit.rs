//! The audit log: one JSON line per call, read and prompt, saying who did what in which
//! session with which plugin, the input's SHA-256 and not the input (unless asked), and how
//! it ended.

use llm_worker::mcp::{AuditLog, BearerToken, HttpOptions, McpOptions, ToolCatalog, ToolGroup};
use llm_worker::{PreToolCallAction, ToolCallContext};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use sha2::Digest;

use crate::Shared;

const ALICE: &str = "alice-token-0123456789abcdef";

async fn serve(log: AuditLog) -> String {
    let options = McpOptions::new("audited", "1")
        .audit(log)
        .pre_tool_call_hook(|ctx: &mut ToolCallContext| {
            if ctx.call.name == "list_notes" {
                PreToolCallAction::Abort("not today".into())
            } else {
                PreToolCallAction::Continue
            }
        });
    crate::serve_with(
        ToolCatalog::new([ToolGroup::plugin(&llm_worker_tests::plugin("notes"))]),
        options,
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await
}

/// Alice's session with the server at `url`.
async fn alice(url: &str) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(ALICE),
    ))
    .await
    .expect("initialize")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_read_and_prompt_leaves_a_record_without_its_input() {
    let out = Shared::default();
    let url = serve(AuditLog::to_writer(out.clone())).await;
    let client = alice(&url).await;
    let mut add = CallToolRequestParams::new("add_note");
    add.arguments = json!({"text": "the secret plan"}).as_object().cloned();
    client.call_tool(add).await.expect("add_note");
    assert!(
        client
            .call_tool(CallToolRequestParams::new("list_notes"))
            .await
            .is_err()
    );
    client
        .read_resource(ReadResourceRequestParams::new("notes://all"))
        .await
        .expect("read");
    client
        .get_prompt(GetPromptRequestParams::new("review"))
        .await
        .expect("prompt");
    // What a client names is quoted in its error: it does not choose the outcome recorded.
    assert!(
        client
            .call_tool(CallToolRequestParams::new("probe was cancelled"))
            .await
            .is_err()
    );
    assert!(
        client
            .get_prompt(GetPromptRequestParams::new("x refused by a hook"))
            .await
            .is_err()
    );
    client.cancel().await.expect("close");

    let records = out.records();
    let events: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["event"].as_str().unwrap_or_default(),
                r["target"].as_str().unwrap_or_default(),
                r["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("tools/call", "add_note", "ok"),
            ("tools/call", "list_notes", "refused"),
            ("resources/read", "notes://all", "ok"),
            ("prompts/get", "review", "ok"),
            ("tools/call", "probe was cancelled", "error"),
            ("prompts/get", "x refused by a hook", "error"),
        ]
    );
    let plugin = llm_worker_tests::plugin("notes");
    let digest: String = plugin.sha256().iter().map(|b| format!("{b:02x}")).collect();
    for record in &records[..4] {
        assert_eq!(record["identity"], "alice", "{record}");
        assert_eq!(record["plugin"], "notes", "{record}");
        assert_eq!(record["plugin_sha256"], digest.as_str(), "{record}");
        assert!(
            record["session"].as_str().is_some_and(|s| !s.is_empty()),
            "{record}"
        );
        assert!(
            record["time"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{record}"
        );
        assert!(record["duration_ms"].as_f64().is_some(), "{record}");
        assert!(record.get("input").is_none(), "{record}");
    }
    let input = json!({"text": "the secret plan"}).to_string();
    let expected: String = sha2::Sha256::digest(input.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(records[0]["input_sha256"], expected.as_str());
    // The plugin's code ran on the host's threads: its CPU time is counted, within the call's.
    let cpu = records[0]["cpu_ms"].as_f64().expect("cpu_ms");
    assert!(
        cpu > 0.0 && cpu <= records[0]["duration_ms"].as_f64().expect("duration") + 1.0,
        "{}",
        records[0]
    );
    assert_eq!(
        records[1]["cpu_ms"], 0.0,
        "a call a hook refused ran nothing"
    );
    let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("UTF-8");
    assert!(
        !text.contains("secret plan"),
        "the input is not written: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_are_written_when_the_operator_asks() {
    let out = Shared::default();
    let url = serve(AuditLog::to_writer(out.clone()).with_inputs(true)).await;
    let client = alice(&url).await;
    let mut add = CallToolRequestParams::new("add_note");
    add.arguments = json!({"text": "kept"}).as_object().cloned();
    client.call_tool(add).await.expect("add_note");
    // The attack: requests of megabytes (here for a tool nobody offers, refused before any
    // plugin code runs), each written whole into the log. An input over 64 KiB is recorded
    // by its digest and size.
    let mut large = CallToolRequestParams::new("no_such_tool");
    large.arguments = json!({"text": "x".repeat(1 << 20)}).as_object().cloned();
    let _ = client.call_tool(large).await;
    client.cancel().await.expect("close");
    let records = out.records();
    assert_eq!(records[0]["input"], json!({"text": "kept"}));
    assert!(records[0].get("input_bytes").is_none(), "{}", records[0]);
    let refused = &records[1];
    assert!(
        refused.get("input").is_none(),
        "the large input was written"
    );
    assert_eq!(refused["input_bytes"], json!((1 << 20) + 11), "{refused}");
    assert!(refused["input_sha256"].is_string(), "{refused}");
}

#[cfg(unix)]
#[test]
fn an_audit_file_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = llm_worker_tests::scratch_dir("audit-file");
    let path = dir.join("audit.jsonl");
    AuditLog::to_file(&path).expect("created");
    assert_eq!(
        std::fs::metadata(&path).expect("file").permissions().mode() & 0o777,
        0o600
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let error = AuditLog::to_file(&path)
        .expect_err("readable by others")
        .to_string();
    assert!(
        error.contains("chmod 600") && error.contains("audit.jsonl"),
        "{error}"
    );
    let error = AuditLog::to_file(dir.path())
        .expect_err("a directory")
        .to_string();
    assert!(error.contains("audit log"), "{error}");
    // A link planted under the name (one leading nowhere would have its target created, the
    // user's own and private, so passing the checks), or a directory others may write.
    let planted = dir.join("planted.jsonl");
    std::os::unix::fs::symlink(dir.join("profile"), &planted).expect("symlink");
    let error = AuditLog::to_file(&planted).expect_err("a link").to_string();
    assert!(error.contains("symbolic link"), "{error}");
    assert!(
        !dir.join("profile").exists(),
        "the link's target was not created"
    );
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let error = AuditLog::to_file(&shared.join("audit.jsonl"))
        .expect_err("a directory others may write")
        .to_string();
    assert!(error.contains("chmod go-w"), "{error}");
    assert!(!shared.join("audit.jsonl").exists());
}

/// The attack: Bob learns Alice's session id and tries it. He is refused (404, as though the
/// session had ended), but that was counted in a metric only: nothing said who tried which
/// session. The audit log now has a record of it, naming him and the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_at_another_identitys_session_is_audited() {
    const BOB: &str = "bob-token-0123456789abcdef01";
    let out = Shared::default();
    let url = crate::serve_with(
        ToolCatalog::new([ToolGroup::plugin(&llm_worker_tests::plugin("notes"))]),
        McpOptions::new("audited", "1").audit(AuditLog::to_writer(out.clone())),
        HttpOptions::default().named_tokens([
            BearerToken::new("alice", ALICE),
            BearerToken::new("bob", BOB),
        ]),
    )
    .await;
    let post = |token: &'static str, session: Option<String>, body: serde_json::Value| {
        let mut request = reqwest::Client::new()
            .post(&url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let opened = post(
        ALICE,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "alice", "version": "1"}}}),
    )
    .await
    .expect("initialize");
    let session = opened
        .headers()
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .expect("a session")
        .to_owned();
    let tried = post(
        BOB,
        Some(session.clone()),
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    )
    .await
    .expect("an answer");
    assert_eq!(tried.status(), 404);
    let records = out.records();
    let record = records
        .iter()
        .find(|record| record["event"] == "http")
        .unwrap_or_else(|| panic!("a record of the refusal: {records:?}"));
    assert_eq!(record["target"], "another_identitys_session");
    assert_eq!(record["identity"], "bob");
    assert_eq!(record["session"], session.as_str());
    assert_eq!(record["outcome"], "refused");
    // A session id no session has (one that ended, a client's own old one) is no one's: the
    // same 404, and no record naming a try at another's.
    let unknown = post(
        BOB,
        Some("no-such-session".to_owned()),
        json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
    )
    .await
    .expect("an answer");
    assert_eq!(unknown.status(), 404);
    let tries = out
        .records()
        .iter()
        .filter(|record| record["event"] == "http")
        .count();
    assert_eq!(tries, 1);
}

/// A call of a tool the access policy withholds from the identity: the client is told there
/// is no such tool (as for a name nothing offers), and the audit log said only `error`, with
/// no plugin, so an operator could not tell a probe of withheld tools from a typo. The record
/// now says `denied` and names the plugin offering it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_a_withheld_tool_is_audited_as_denied_naming_its_plugin() {
    let out = Shared::default();
    let notes = llm_worker_tests::plugin("notes");
    // Alice may use one tool of `notes`, and nothing of `counter`.
    let counter = llm_worker_tests::plugin("counter");
    let access = llm_worker::mcp::AccessPolicy::parse(
        "[[grant]]\nwho = [\"token:alice\"]\ntools = [\"notes/list_notes\"]\n",
    )
    .expect("a policy");
    let url = crate::serve_with(
        ToolCatalog::new([ToolGroup::plugin(&notes), ToolGroup::plugin(&counter)]),
        McpOptions::new("audited", "1")
            .audit(AuditLog::to_writer(out.clone()))
            .access(access),
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await;
    let client = alice(&url).await;
    let mut add = CallToolRequestParams::new("add_note");
    add.arguments = json!({"text": "x"}).as_object().cloned();
    let withheld = client.call_tool(add).await.expect_err("withheld");
    client
        .call_tool(CallToolRequestParams::new("count"))
        .await
        .expect_err("withheld whole");
    let unknown = client
        .call_tool(CallToolRequestParams::new("no_such_tool"))
        .await
        .expect_err("unknown");
    // The client cannot tell the two apart …
    let said = |error: &rmcp::ServiceError| error.to_string().replace("add_note", "NAME");
    assert_eq!(
        said(&withheld),
        said(&unknown).replace("no_such_tool", "NAME")
    );
    // … the operator can.
    let records = out.records();
    let record = |target: &str| {
        records
            .iter()
            .find(|record| record["event"] == "tools/call" && record["target"] == target)
            .unwrap_or_else(|| panic!("a record of {target}: {records:?}"))
            .clone()
    };
    let denied = record("add_note");
    assert_eq!(denied["outcome"], "denied");
    assert_eq!(denied["identity"], "alice");
    assert_eq!(denied["plugin"], "notes");
    let digest: String = notes.sha256().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(denied["plugin_sha256"], digest.as_str());
    // A plugin the identity may use nothing of is not in its session, and is named all the
    // same.
    let denied = record("count");
    assert_eq!(denied["outcome"], "denied");
    assert_eq!(denied["plugin"], "counter");
    let unknown = record("no_such_tool");
    assert_eq!(unknown["outcome"], "error");
    assert!(unknown["plugin"].is_null(), "{unknown}");
    client.cancel().await.expect("close");
}

/// An audit log whose writes wait until the test opens its gate (a disk that hangs), telling
/// the test when one starts waiting. Dropped, it opens the gate, so that a failing test ends.
#[derive(Clone, Default)]
struct Hanging {
    open: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    waiting: std::sync::Arc<tokio::sync::Notify>,
}

impl Hanging {
    fn open(&self) {
        *self.open.0.lock().expect("lock") = true;
        self.open.1.notify_all();
    }
}

impl std::io::Write for Hanging {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.waiting.notify_one();
        let mut open = self.open.0.lock().expect("lock");
        while !*open {
            open = self.open.1.wait(open).expect("wait");
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Opens the gate when dropped.
struct Opens(Hanging);

impl Drop for Opens {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Records written to a disk that hangs, by as many calls as the runtime has workers: the
/// writes held every worker (the one writing, the others waiting for it), and the whole server
/// stood still, health checks included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_audit_log_holds_its_writers_not_the_server() {
    let out = Hanging::default();
    let _opens = Opens(out.clone());
    // Should the writes hold every worker again, nothing of the runtime would run (its timers
    // neither): this thread opens the gate after the tests' deadline, so the test fails
    // instead of hanging.
    let watchdog = out.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(90));
        watchdog.open();
    });
    let url = serve(AuditLog::to_writer(out.clone())).await;
    let mut calls = Vec::new();
    for _ in 0..2 {
        let url = url.clone();
        calls.push(tokio::spawn(async move {
            let client = alice(&url).await;
            let mut add = CallToolRequestParams::new("add_note");
            add.arguments = json!({"text": "held"}).as_object().cloned();
            let added = client.call_tool(add).await.map(|_| ());
            client.cancel().await.expect("close");
            added
        }));
    }
    llm_worker_tests::wait::within("a record's write", out.waiting.notified()).await;
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let health = llm_worker_tests::wait::within("the health check", async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connect");
        stream
            .write_all(format!("GET /healthz HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
            .await
            .expect("send");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        answer
    })
    .await;
    assert!(health.starts_with("HTTP/1.0 200"), "{health}");
    out.open();
    for call in calls {
        assert!(call.await.expect("joins").is_ok());
    }
}
