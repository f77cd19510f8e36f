//! Tools per identity: under an access policy, each identity lists, calls, reads and renders
//! only what a grant gives it, and hooks see who asked.

use std::sync::{Arc, Mutex};

use llm_worker::mcp::{AccessPolicy, BearerToken, HttpOptions, McpOptions, ToolCatalog, ToolGroup};
use llm_worker::{PreToolCallAction, ToolCallContext};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use crate::counters;

pub(crate) const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef01";
const CAROL: &str = "carol-token-0123456789abcdef";

/// A client of `url` sending `token`, initialised.
pub(crate) async fn client(
    url: &str,
    token: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    ))
    .await
    .expect("initialize")
}

async fn tool_names(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>) -> Vec<String> {
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|tool| tool.name.to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_sees_and_calls_only_what_it_is_granted() {
    let policy = AccessPolicy::parse(
        r#"
        [[grant]]
        who = ["token:alice"]
        tools = ["first/*", "notes/*"]

        [[grant]]
        who = ["token:bob"]
        tools = ["second/b1", "notes/list_notes"]
        "#,
    )
    .expect("a policy");
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = Arc::clone(&seen);
    let options = McpOptions::new("access", "1")
        .access(policy)
        .pre_tool_call_hook(move |ctx: &mut ToolCallContext| {
            let who = ctx
                .identity
                .as_ref()
                .map_or("nobody".into(), |i| i.name.clone());
            record
                .lock()
                .expect("lock")
                .push(format!("{who}:{}", ctx.call.name));
            PreToolCallAction::Continue
        });
    let url = crate::serve_with(
        ToolCatalog::new([
            counters("first", 1, &["a1", "a2"]),
            counters("second", 1, &["b1", "b2"]),
            llm_worker::mcp::ToolGroup::plugin(&llm_worker_tests::plugin("notes")),
        ]),
        options,
        HttpOptions::default().named_tokens([
            BearerToken::new("alice", ALICE),
            BearerToken::new("bob", BOB),
            BearerToken::new("carol", CAROL),
        ]),
    )
    .await;

    let alice = client(&url, ALICE).await;
    let alice_tools = tool_names(&alice).await;
    assert!(alice_tools.contains(&"a1".to_owned()) && alice_tools.contains(&"a2".to_owned()));
    assert!(
        !alice_tools.iter().any(|t| t.starts_with('b')),
        "{alice_tools:?}"
    );
    assert!(
        !alice
            .list_all_resources()
            .await
            .expect("resources/list")
            .is_empty()
            || !alice
                .list_all_resource_templates()
                .await
                .expect("templates")
                .is_empty(),
        "alice has all of notes"
    );

    let bob = client(&url, BOB).await;
    let bob_tools = tool_names(&bob).await;
    assert_eq!(bob_tools, ["b1", "list_notes"]);
    // A tool outside his set is not there for him, listed or not.
    for name in ["a1", "b2", "add_note"] {
        let refused = bob.call_tool(CallToolRequestParams::new(name)).await;
        assert!(refused.is_err(), "bob called {name}: {refused:?}");
    }
    bob.call_tool(CallToolRequestParams::new("b1"))
        .await
        .expect("his own tool");
    // A tool alone gives none of its plugin's resources or prompts.
    assert!(
        bob.list_all_resources()
            .await
            .expect("resources/list")
            .is_empty()
    );
    assert!(
        bob.list_all_resource_templates()
            .await
            .expect("templates")
            .is_empty()
    );
    assert!(
        bob.list_all_prompts()
            .await
            .expect("prompts/list")
            .is_empty()
    );

    // Carol holds a good token and no grant: she sees nothing.
    let carol = client(&url, CAROL).await;
    assert!(tool_names(&carol).await.is_empty());
    assert!(
        carol
            .call_tool(CallToolRequestParams::new("a1"))
            .await
            .is_err()
    );

    alice
        .call_tool(CallToolRequestParams::new("a1"))
        .await
        .expect("her own tool");
    assert_eq!(
        *seen.lock().expect("lock"),
        ["bob:b1", "alice:a1"],
        "the hooks saw who asked, and only the calls that ran"
    );
    for client in [alice, bob, carol] {
        client.cancel().await.expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_past_its_quota_is_refused_with_an_error_that_says_so() {
    let policy = AccessPolicy::parse(
        r#"
        [quota]
        sessions = 1
        calls_per_minute = 2

        [[grant]]
        who = ["token:alice", "token:bob"]
        tools = ["*"]

        [[grant]]
        who = ["token:bob"]
        tools = ["*"]
        quota = { calls_per_minute = 100 }
        "#,
    )
    .expect("a policy");
    let url = serve_alice_and_bob(policy).await;
    let alice = client(&url, ALICE).await;
    // One session: a second is refused while the first is open.
    let second = initialize_answer(&url, ALICE).await;
    assert_eq!(second.status(), 429);
    let body: serde_json::Value =
        serde_json::from_str(&second.text().await.expect("a body")).expect("JSON-RPC");
    assert_eq!(body["error"]["code"], llm_worker::mcp::QUOTA_EXCEEDED);
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("alice is over its quota of 1 sessions"),
        "{message}"
    );

    for _ in 0..2 {
        alice
            .call_tool(CallToolRequestParams::new("a1"))
            .await
            .expect("within the quota");
    }
    crate::assert_over_quota(
        alice.call_tool(CallToolRequestParams::new("a1")).await,
        "alice is over its quota of 2 calls per minute",
        "a third call this minute",
    );
    // Bob's grant gives him more, and Alice's use is not his.
    let bob = client(&url, BOB).await;
    for _ in 0..3 {
        bob.call_tool(CallToolRequestParams::new("a1"))
            .await
            .expect("bob's quota");
    }
    for client in [alice, bob] {
        client.cancel().await.expect("close");
    }
}

/// A counter `a1` served under `policy` to Alice and Bob: its URL.
async fn serve_alice_and_bob(policy: AccessPolicy) -> String {
    crate::serve_with(
        ToolCatalog::new([counters("first", 1, &["a1"])]),
        McpOptions::new("quotas", "1").access(policy),
        HttpOptions::default().named_tokens([
            BearerToken::new("alice", ALICE),
            BearerToken::new("bob", BOB),
        ]),
    )
    .await
}

/// POSTs an `initialize` to `url` with `token`: the status.
async fn initialize(url: &str, token: &str) -> u16 {
    initialize_answer(url, token).await.status().as_u16()
}

/// POSTs an `initialize` to `url` with `token`: the answer.
async fn initialize_answer(url: &str, token: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            serde_json::json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "test", "version": "1"}},
            })
            .to_string(),
        )
        .send()
        .await
        .expect("an answer")
}

/// The attack: an identity allowed one session opens it, then sends its calls with the
/// session's id and the stateless revision's `_meta`; rmcp serves such a request as a stateless
/// one, outside the session and outside the place among the identity's sessions that a
/// stateless request holds, so that any number of them ran at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_request_cannot_pass_for_stateless() {
    let policy =
        AccessPolicy::parse("[quota]\nsessions = 1\n\n[[grant]]\nwho = [\"*\"]\ntools = [\"*\"]\n")
            .expect("a policy");
    let url = serve_alice_and_bob(policy).await;
    let opened = initialize_answer(&url, ALICE).await;
    assert_eq!(opened.status(), 200);
    let session = opened
        .headers()
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .expect("text")
        .to_owned();
    // With the stateless revision's `_meta` (and the header it must match), or with the header
    // alone, or with that `_meta` naming a version that has sessions (rmcp serves any request
    // carrying both keys statelessly): each way rmcp would serve it statelessly, outside the
    // session and outside alice's quota of one session. The first two are refused at the
    // door (400), the third by the session's handler (a JSON-RPC error).
    let meta = |version: &str| {
        serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        })
    };
    for (params, header) in [
        (
            serde_json::json!({"name": "a1", "arguments": {}, "_meta": meta("2026-07-28")}),
            "2026-07-28",
        ),
        (
            serde_json::json!({"name": "a1", "arguments": {}}),
            "2026-07-28",
        ),
        (
            serde_json::json!({"name": "a1", "arguments": {}, "_meta": meta("2025-11-25")}),
            "2025-11-25",
        ),
    ] {
        let answer = reqwest::Client::new()
            .post(&url)
            .bearer_auth(ALICE)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", header)
            .header("mcp-method", "tools/call")
            .header("mcp-name", "a1")
            .body(
                serde_json::json!({
                    "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params,
                })
                .to_string(),
            )
            .send()
            .await
            .expect("an answer");
        let status = answer.status();
        let text = answer.text().await.expect("a body");
        let refused_as = if header == "2026-07-28" { 400 } else { 200 };
        assert!(
            status == refused_as
                && text.contains("cannot carry the stateless revision")
                && !text.contains("\"isError\""),
            "{params}: {status} {text}"
        );
    }
}

/// A stateless (2026-07-28) client of `url` that bears `token` and answers elicitations.
async fn stateless_client(
    url: &str,
    token: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig> {
    use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
    use rmcp::service::ClientServiceExt;
    let mut capabilities = ClientCapabilities::default();
    capabilities.elicitation = Some(Default::default());
    ClientConfig::new(capabilities, Implementation::new("states", "1"))
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
            ),
            rmcp::service::ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a stateless client")
}

/// The retry of the conformance fixture's `test_elicitation` call, answering the question its
/// first round asked, with the request state that round returned.
async fn asked_and_answered(
    client: &rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>,
) -> CallToolRequestParams {
    use rmcp::model::CallToolResponse;
    let mut ask = CallToolRequestParams::new("test_elicitation");
    ask.arguments = serde_json::json!({"message": "Who are you?"})
        .as_object()
        .cloned();
    let first = client.call_tool_once(ask.clone()).await.expect("call");
    let CallToolResponse::InputRequired(first) = first else {
        panic!("input_required was expected: {first:?}");
    };
    let mut retry = ask;
    retry.input_responses = Some(
        [(
            "user_info".to_owned(),
            serde_json::from_value(serde_json::json!({"action": "accept",
                "content": {"username": "alice", "email": "alice@example.com"}}))
            .expect("a response"),
        )]
        .into_iter()
        .collect(),
    );
    retry.request_state = first.request_state.clone();
    assert!(retry.request_state.is_some(), "{first:?}");
    retry
}

/// The attack: a request state (2026-07-28's multi round-trip input: the answers of earlier
/// rounds, sealed by the server) leaked from one caller is replayed by another, who goes on
/// with the first caller's answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_is_its_callers_alone() {
    let conformance = llm_worker_tests::plugin("conformance");
    let url = crate::serve_with(
        ToolCatalog::from_plugins([&conformance]),
        McpOptions::new("states", "1"),
        HttpOptions::default().named_tokens([
            BearerToken::new("alice", ALICE),
            BearerToken::new("bob", BOB),
        ]),
    )
    .await;
    let (alice, bob) = (
        stateless_client(&url, ALICE).await,
        stateless_client(&url, BOB).await,
    );
    let retry = asked_and_answered(&alice).await;
    let replayed = bob.call_tool_once(retry.clone()).await;
    assert!(
        format!("{replayed:?}").contains("integrity check failed"),
        "{replayed:?}"
    );
    let answered = alice.call_tool_once(retry).await.expect("alice's retry");
    assert!(
        format!("{answered:?}").contains("User response"),
        "{answered:?}"
    );
}

/// A request state issued before the plugin that serves the request was replaced (a new
/// version, another policy) does not open after it: the retry is refused, and the client asks
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_is_its_plugin_versions_alone() {
    let conformance = llm_worker_tests::plugin("conformance");
    let catalog = ToolCatalog::from_plugins([&conformance]);
    let url = crate::serve_with(
        catalog.clone(),
        McpOptions::new("states", "1"),
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await;
    let alice = stateless_client(&url, ALICE).await;
    let retry = asked_and_answered(&alice).await;
    // The plugin is replaced by the same bytes under another policy: another revision.
    let mut limits = llm_worker::Limits::default();
    limits.max_output_bytes /= 2;
    let replaced = llm_worker_tests::host()
        .load_with_policy(
            llm_worker_tests::plugin_path("conformance"),
            llm_worker::SandboxPolicy::with_limits(limits),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(
        ToolGroup::plugin(&conformance).revision(),
        ToolGroup::plugin(&replaced).revision()
    );
    catalog.replace([ToolGroup::plugin(&replaced)]);
    let refused = alice.call_tool_once(retry).await;
    assert!(
        format!("{refused:?}").contains("integrity check failed"),
        "{refused:?}"
    );
    // Asked again, under the new version, it is answered.
    let retry = asked_and_answered(&alice).await;
    let answered = alice.call_tool_once(retry).await.expect("the new retry");
    assert!(
        format!("{answered:?}").contains("User response"),
        "{answered:?}"
    );
}

/// Holds each call until the test releases it.
struct Hold(Arc<tokio::sync::Notify>);

#[async_trait::async_trait]
impl llm_worker::Tool for Hold {
    async fn execute(&self, _input_json: &str) -> Result<String, llm_worker::ToolError> {
        self.0.notified().await;
        Ok("released".into())
    }
}

/// A stateless (2026-07-28) `tools/call` of `tool` by Alice to `url`, with a progress token if
/// `progress`.
fn stateless_call(url: &str, tool: &str, progress: bool) -> reqwest::RequestBuilder {
    let mut meta = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    });
    if progress {
        meta["progressToken"] = serde_json::json!(1);
    }
    reqwest::Client::new()
        .post(url)
        .bearer_auth(ALICE)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(
            serde_json::json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": {}, "_meta": meta},
            })
            .to_string(),
        )
}

/// The attack: a stateless request holds a place among its identity's sessions while it runs,
/// but rmcp answers as soon as its first message is there (a progress report, when the client
/// sent a token), and the place was given back then: with a progress token, an identity
/// allowed one session ran any number of calls at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_call_holds_its_place_until_its_answer_ends() {
    let policy =
        AccessPolicy::parse("[quota]\nsessions = 1\n\n[[grant]]\nwho = [\"*\"]\ntools = [\"*\"]\n")
            .expect("a policy");
    let release = Arc::new(tokio::sync::Notify::new());
    let held = Arc::clone(&release);
    let group = llm_worker::mcp::ToolGroup::new("held", 1, move || {
        let held = Arc::clone(&held);
        let hold: llm_worker::ToolDefinition = Arc::new(move || {
            let meta = llm_worker::ToolMeta::new("hold")
                .description("Holds")
                .input_schema(serde_json::json!({"type": "object"}));
            (
                meta,
                Arc::new(Hold(Arc::clone(&held))) as Arc<dyn llm_worker::Tool>,
            )
        });
        vec![hold]
    });
    let url = crate::serve_with(
        ToolCatalog::new([group]),
        McpOptions::new("quotas", "1").access(policy),
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await;
    // Answered (its stream begun) once the call reports it is running; the call goes on.
    let first = stateless_call(&url, "hold", true)
        .send()
        .await
        .expect("an answer");
    assert_eq!(first.status(), 200);
    // Refused at once; served, it would hold until released (a liveness bound).
    let second = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        stateless_call(&url, "hold", false).send(),
    )
    .await
    .expect("a second call is refused at once, not served")
    .expect("an answer");
    assert_eq!(
        second.status(),
        429,
        "a second call while the first one's answer streams"
    );
    release.notify_one();
    let text = first.text().await.expect("the first call's answer");
    assert!(text.contains("released"), "{text}");
    // Its place is free again.
    let third = stateless_call(&url, "hold", true)
        .send()
        .await
        .expect("an answer");
    assert_eq!(third.status(), 200);
    release.notify_one();
    let text = third.text().await.expect("the third call's answer");
    assert!(text.contains("released"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_opened_at_once_do_not_get_past_the_quota_together() {
    let policy =
        AccessPolicy::parse("[quota]\nsessions = 1\n\n[[grant]]\nwho = [\"*\"]\ntools = [\"*\"]\n")
            .expect("a policy");
    let url = serve_alice_and_bob(policy).await;
    let statuses = futures::future::join_all((0..8).map(|_| initialize(&url, ALICE))).await;
    let opened = statuses.iter().filter(|status| **status == 200).count();
    assert_eq!(opened, 1, "{statuses:?}");
    assert!(
        statuses.iter().all(|status| matches!(status, 200 | 429)),
        "{statuses:?}"
    );
    // Another identity's quota is its own.
    assert_eq!(initialize(&url, BOB).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_several_issuers_a_grant_by_claim_must_name_its_issuer() {
    let policy = AccessPolicy::parse("[[grant]]\nwho = [\"group:admins\"]\ntools = [\"*\"]\n")
        .expect("a policy");
    let oauth = llm_worker::mcp::OAuthOptions::new(
        "http://127.0.0.1:1/mcp".parse().expect("a URL"),
        [
            llm_worker::mcp::IssuerOptions::new("https://one.example"),
            llm_worker::mcp::IssuerOptions::new("https://two.example"),
        ],
    );
    let refused = llm_worker::mcp::McpHttpService::new(
        ToolCatalog::new([counters("first", 1, &["a1"])]),
        McpOptions::new("issuers", "1").access(policy),
        HttpOptions::default().oauth(oauth),
    );
    let error = refused.expect_err("an unbound grant").to_string();
    assert!(
        error.contains("grant(s) [1]") && error.contains("issuer"),
        "{error}"
    );
    // A grant to anyone is what it says (every token of every issuer): not refused, but
    // found, for the warning at start.
    let anyone = AccessPolicy::parse(
        "[[grant]]\nwho = [\"*\"]\ntools = [\"first/*\"]\n\n[[grant]]\nwho = [\"*\"]\nissuer = \"https://one.example\"\ntools = [\"*\"]\n",
    )
    .expect("a policy");
    assert_eq!(anyone.grants_to_anyone_of_any_issuer(), [1]);
    assert!(anyone.grants_without_issuer().is_empty());
}

/// A server of the contract 1.0.0 `waiter` plugin (calls limited to `timeout`) for Alice, under
/// a quota of one CPU second per minute.
async fn waiter_under_a_cpu_quota(timeout: std::time::Duration) -> String {
    use llm_worker::{Limits, SandboxPolicy};
    let policy = a_cpu_second_a_minute_for_alice();
    let mut limits = Limits::default();
    limits.call_timeout = timeout;
    let mut sandbox = SandboxPolicy::with_limits(limits);
    // It imports wasi:http (its `fetch`), linked only where the policy grants a destination.
    sandbox
        .http
        .push(llm_worker::HttpGrant::parse("http://127.0.0.1:9").expect("rule"));
    let waiter = llm_worker_tests::host()
        .load_with_policy(llm_worker_tests::plugin_path("waiter"), sandbox)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(waiter.contract_version(), "1.0.0");
    crate::serve_with(
        ToolCatalog::from_plugins([&waiter]),
        McpOptions::new("cpu", "1").access(policy),
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await
}

/// The attack: a contract 1.0.0 plugin runs its calls in the instance's event loop, not in the
/// request's future; its code's CPU time went uncounted, so an identity under a CPU quota
/// could spin a core for as long as each call's time limit allowed, call after call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpu_time_of_a_contract_1_plugins_code_counts_against_the_quota() {
    // `spin` runs code until its time limit stops it (and with it the instance).
    let url = waiter_under_a_cpu_quota(std::time::Duration::from_secs(3)).await;
    let alice = client(&url, ALICE).await;
    alice
        .call_tool(CallToolRequestParams::new("bump"))
        .await
        .expect("within the quota");
    // A spin of 3 s gets a second of the CPU unless the machine is busy with other work: then
    // it takes a few spins.
    let mut answer = Ok(None);
    for _ in 0..10 {
        let spun = alice
            .call_tool(CallToolRequestParams::new("spin"))
            .await
            .expect("an answer");
        assert_eq!(spun.is_error, Some(true), "{spun:?}");
        // Its code may be stopped (and its time counted) a moment after its caller was
        // answered.
        for _ in 0..20 {
            answer = alice
                .call_tool(CallToolRequestParams::new("bump"))
                .await
                .map(Some);
            if answer.is_err() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        if answer.is_err() {
            break;
        }
    }
    crate::assert_over_quota(
        answer,
        "alice is over its quota of 1 CPU seconds per minute",
        "the quota is spent",
    );
    alice.cancel().await.expect("close");
}

/// The same while the code runs: its CPU time was read when the instance's event loop switched
/// away from the call, which code that spins never does (it yields at each epoch tick without
/// leaving its call), and across the loop's polls on different threads, whose CPU clocks do
/// not compare. An identity under the quota could spin for a whole time limit, task after task,
/// without being refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_1_call_that_spins_counts_against_the_quota_while_it_runs() {
    // Far longer than the quota's second: the refusal below comes while it spins.
    let url = waiter_under_a_cpu_quota(std::time::Duration::from_secs(120)).await;
    let spinner = client(&url, ALICE).await;
    let spinning = tokio::spawn(async move {
        let answer = spinner.call_tool(CallToolRequestParams::new("spin")).await;
        (spinner, answer)
    });
    // Alice's other session (an instance of its own, not busy) is refused once the spin has
    // used the quota's second: a liveness bound far above it, and far below the spin's limit.
    let other = client(&url, ALICE).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let answer = loop {
        let answer = other.call_tool(CallToolRequestParams::new("bump")).await;
        if answer.is_err() {
            break answer;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never refused while the call spun"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(!spinning.is_finished(), "refused only after the spin ended");
    crate::assert_over_quota(
        answer,
        "alice is over its quota of 1 CPU seconds per minute",
        "a call while another spins",
    );
    spinning.abort();
    other.cancel().await.expect("close");
}

/// The attack: under an access policy, a stateless request (revision 2026-07-28) whose
/// `Mcp-Param-*` header says something else than its body. rmcp checks those headers against
/// the tool's schema, which it looks up on a handler made before the request's own: that
/// handler, bound to no identity yet, showed no tool, so the headers were never checked (an
/// intermediary routing on `eu` while the plugin ran `us`). The lookup now finds the tools of
/// the identity asking, and the request is refused; one whose headers agree is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn param_headers_are_checked_under_an_access_policy_too() {
    let policy = AccessPolicy::parse(
        "[[grant]]\nwho = [\"token:alice\"]\ntools = [\"conformance/test_x_mcp_header\"]\n",
    )
    .expect("a policy");
    let url = crate::serve_with(
        ToolCatalog::from_plugins([&llm_worker_tests::plugin("conformance")]),
        McpOptions::new("access", "1").access(policy),
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await;
    let post = |name: &'static str, region: Option<&'static str>| {
        let url = url.clone();
        async move {
            let body = serde_json::json!({
                "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": name, "arguments": {"region": "eu"}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                }},
            });
            let mut request = reqwest::Client::new()
                .post(&url)
                .bearer_auth(ALICE)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", name)
                .body(body.to_string());
            if let Some(region) = region {
                request = request.header("mcp-param-region", region);
            }
            let answer = request.send().await.expect("an answer");
            let status = answer.status().as_u16();
            (status, answer.text().await.expect("a body"))
        }
    };
    let (status, text) = post("test_x_mcp_header", Some("eu")).await;
    assert!(
        status == 200 && text.contains("region: eu"),
        "{status} {text}"
    );
    for (region, why) in [(Some("us"), "does not match"), (None, "Mcp-Param-Region")] {
        let (status, text) = post("test_x_mcp_header", region).await;
        assert_eq!(status, 400, "{region:?}: {text}");
        assert!(
            text.contains(why) && !text.contains("region: "),
            "{region:?}: {text}"
        );
    }
}

/// An access policy granting alice everything, within a CPU second a minute.
fn a_cpu_second_a_minute_for_alice() -> AccessPolicy {
    AccessPolicy::parse(
        "[quota]\ncpu_seconds_per_minute = 1\n\n[[grant]]\nwho = [\"token:alice\"]\ntools = [\"*\"]\n",
    )
    .expect("a policy")
}

/// A directory holding `spinner.wasm`, a component whose core start function spins while it
/// has an environment variable (quick to load: listing its tools grants it nothing; slow to
/// start for a session), with a policy setting one and a time limit long enough to spin past
/// a CPU second on a busy machine (the session's end stops it).
fn spinner_dir(name: &str) -> llm_worker_tests::ScratchDir {
    let dir = llm_worker_tests::scratch_dir(name);
    std::fs::write(
        dir.join("spinner.wasm"),
        llm_worker_tests::wat::start_gated_on_environment(),
    )
    .expect("write");
    std::fs::write(
        dir.join("spinner.policy.toml"),
        "[env]\nset = { SPIN = \"1\" }\n\n[limits]\ntimeout_ms = 20000\n",
    )
    .expect("policy");
    dir
}

/// The attack: an identity allowed a second of CPU a minute opens sessions (and closes them)
/// in a loop. Opening one starts every granted plugin's instance, its start code included,
/// outside the quota: each round ran plugin code counted nowhere. The start's CPU time now
/// counts against the identity's CPU quota: after one session whose plugin spins while it
/// starts, the identity's calls are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_start_counts_against_the_identitys_cpu_quota() {
    let dir = spinner_dir("quota-start-spins");
    let spinner = llm_worker_tests::host()
        .load(dir.join("spinner.wasm"))
        .expect("load");
    // Its instance spins for its time limit while it starts: in a session opened with it, and
    // in one opened before the catalog had it (a `--watch` reload adding it).
    for later in [false, true] {
        let access = a_cpu_second_a_minute_for_alice();
        let all = [ToolGroup::plugin(&spinner), counters("first", 1, &["a1"])];
        let catalog = if later {
            ToolCatalog::new([counters("first", 1, &["a1"])])
        } else {
            ToolCatalog::new(all.clone())
        };
        let url = crate::serve_with(
            catalog.clone(),
            McpOptions::new("quotas", "1").access(access),
            HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
        )
        .await;
        let alice = client(&url, ALICE).await;
        if later {
            alice
                .call_tool(CallToolRequestParams::new("a1"))
                .await
                .expect("within the quota");
            catalog.replace(all);
        }
        let refused = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            loop {
                match alice.call_tool(CallToolRequestParams::new("a1")).await {
                    Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                    Err(error) => return error,
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("later: {later}: the start's CPU time was not counted"));
        crate::assert_over_quota::<()>(
            Err(refused),
            "alice is over its quota of 1 CPU seconds per minute",
            "a call after the start spent the minute's CPU",
        );
        alice.cancel().await.expect("close");
    }
}

/// The quota is checked before a session's instances start: two sessions opened at once each
/// found it unspent and each started its plugins, overshooting it by as many starts as sessions
/// (up to the `sessions` quota). While one session's instances are starting, another session of
/// the identity now starts its instances with its calls, each checked against the quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_opened_at_once_do_not_each_start_their_instances_outside_the_quota() {
    let dir = spinner_dir("quota-starts-at-once");
    // A host of its own: its count of live instances is this test's alone.
    let host = llm_worker::PluginHost::builder()
        .cache_dir(llm_worker_tests::compiled_cache())
        .build()
        .expect("host");
    let spinner = host.load(dir.join("spinner.wasm")).expect("load");
    let before = host.usage().instances;
    let access = a_cpu_second_a_minute_for_alice();
    let url = crate::serve_with(
        ToolCatalog::new([ToolGroup::plugin(&spinner), counters("first", 1, &["a1"])]),
        McpOptions::new("quotas", "1").access(access),
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await;
    let (first, second) = tokio::join!(client(&url, ALICE), client(&url, ALICE));
    // One session's instance spins while it starts, until the quota is spent …
    let refused = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            match first.call_tool(CallToolRequestParams::new("a1")).await {
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                Err(error) => return error,
            }
        }
    })
    .await
    .expect("the start's CPU time was not counted");
    crate::assert_over_quota::<()>(
        Err(refused),
        "alice is over its quota of 1 CPU seconds per minute",
        "a call after the start spent the minute's CPU",
    );
    // … and the other session started none (its calls would start it, and are refused).
    assert_eq!(
        host.usage().instances,
        before + 1,
        "both sessions opened at once started their instances"
    );
    let error = second
        .call_tool(CallToolRequestParams::new("slow"))
        .await
        .expect_err("over the quota");
    crate::assert_over_quota::<()>(
        Err(error),
        "alice is over its quota of 1 CPU seconds per minute",
        "the other session's call",
    );
    assert_eq!(host.usage().instances, before + 1);
    first.cancel().await.expect("close");
    second.cancel().await.expect("close");
}

/// A call of the forger's tool `name` with `arguments`, its text.
async fn forger_says(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    name: &'static str,
    arguments: serde_json::Value,
) -> Result<String, rmcp::ServiceError> {
    let mut call = CallToolRequestParams::new(name);
    call.arguments = arguments.as_object().cloned();
    client
        .call_tool(call)
        .await
        .map(|result| crate::greeting(&result))
}

/// A plugin that says its resource list changed from the code that lists it had every
/// `resources/list` run that code again, and that code's CPU time counted nowhere: an
/// identity under a CPU quota of a second a minute listed in a loop, each list spinning for
/// the plugin's time limit. A change said while its own list is read is now that list, and
/// the list reads a request makes count against its identity's CPU quota: past it, the lists
/// as last read are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_changed_list_counts_against_the_cpu_quota_and_does_not_repeat_itself() {
    let access = a_cpu_second_a_minute_for_alice();
    let url = crate::serve_with(
        ToolCatalog::new([ToolGroup::plugin(&llm_worker_tests::plugin("forger"))]),
        McpOptions::new("lists", "1").access(access),
        HttpOptions::default().named_tokens([BearerToken::new("alice", ALICE)]),
    )
    .await;
    let alice = client(&url, ALICE).await;
    let read = async || -> u32 {
        forger_says(&alice, "lists_read", serde_json::json!({}))
            .await
            .expect("lists_read")
            .parse()
            .expect("a count")
    };
    // Said changed by a call, the list is read once, though its reading says so again.
    forger_says(&alice, "churn", serde_json::json!({"ms": 1}))
        .await
        .expect("churn");
    let before = read().await;
    for _ in 0..3 {
        alice.list_all_resources().await.expect("resources/list");
    }
    assert_eq!(
        read().await,
        before + 1,
        "the list was read again and again"
    );
    // Each read spins: the identity's quota is spent by its lists, and its calls refused.
    let refused = async {
        for _ in 0..40 {
            match forger_says(&alice, "churn", serde_json::json!({"ms": 300})).await {
                Ok(_) => alice.list_all_resources().await.expect("resources/list"),
                Err(error) => return error,
            };
        }
        panic!("the lists' CPU time was not counted");
    }
    .await;
    crate::assert_over_quota::<()>(
        Err(refused),
        "alice is over its quota of 1 CPU seconds per minute",
        "a call after the lists spent the minute's CPU",
    );
    // Lists are still answered, as last read, without running the plugin.
    let listed = alice.list_all_resources().await.expect("resources/list");
    assert!(
        listed.iter().any(|resource| resource.uri == "forger://own"),
        "{listed:?}"
    );
    alice.cancel().await.expect("close");
}
