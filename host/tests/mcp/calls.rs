//! Calls through the server: a slow plugin delays no one else, and the operator's hooks see
//! and can refuse every call.

use std::sync::Arc;

use llm_worker::mcp::{McpOptions, ToolCatalog};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::{counters, greeting, serve};

/// The tools of greet and of a plugin whose start spins for two minutes, as an MCP server:
/// its URL, and the plugins' directory.
async fn greet_beside_a_slow_starter(name: &str) -> (String, llm_worker_tests::ScratchDir) {
    let (loaded, dir) = llm_worker_tests::greet_beside_a_slow_starter(name, 120_000);
    let url = serve(
        ToolCatalog::from_plugins(&loaded.plugins),
        McpOptions::new("slow", "1"),
    )
    .await;
    (url, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_plugin_delays_neither_session_openings_nor_other_plugins() {
    let (url, _dir) = greet_beside_a_slow_starter("mcp-slow-start").await;
    // A session (2025-06-18): initialize, initialized, then a call of greet, while the slow
    // plugin's instance for this session is still starting.
    let stateful = tokio::spawn({
        let url = url.clone();
        async move {
            let client = ()
                .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
                    url.as_str(),
                ))
                .await
                .expect("initialize");
            let mut call = CallToolRequestParams::new("greet");
            call.arguments = json!({"name": "Ada"}).as_object().cloned();
            let result = client.call_tool(call).await.expect("call");
            client.cancel().await.expect("close");
            greeting(&result)
        }
    });
    // A liveness bound far above what these take: before, every opening waited for the slow
    // plugin's whole start.
    let said = tokio::time::timeout(std::time::Duration::from_secs(60), stateful)
        .await
        .expect("the session opened and greet answered")
        .expect("the client task");
    assert_eq!(said, "Hello, Ada!");

    // Stateless requests (2026-07-28): each starts only the plugin it calls.
    let stateless = tokio::spawn(async move {
        let client = crate::stateless_client((), &url).await;
        let mut said = Vec::new();
        for name in ["Bo", "Cy"] {
            let mut call = CallToolRequestParams::new("greet");
            call.arguments = json!({ "name": name }).as_object().cloned();
            said.push(greeting(&client.call_tool(call).await.expect("call")));
        }
        client.cancel().await.expect("close");
        said
    });
    let said = tokio::time::timeout(std::time::Duration::from_secs(60), stateless)
        .await
        .expect("stateless calls of greet do not start the slow plugin")
        .expect("the client task");
    assert_eq!(said, ["Hello, Bo!", "Hello, Cy!"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_hooks_see_and_can_refuse_every_mcp_call() {
    use llm_worker::{PostToolCallAction, PostToolCallContext, PreToolCallAction, ToolCallContext};
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let audit = Arc::clone(&seen);
    let options = McpOptions::new("hooked", "1")
        .pre_tool_call_hook(move |ctx: &mut ToolCallContext| {
            audit
                .lock()
                .expect("audit")
                .push(format!("{} {}", ctx.call.name, ctx.call.input));
            match ctx.call.name.as_str() {
                "forbidden" => PreToolCallAction::Abort("not on weekends".into()),
                "skipped" => PreToolCallAction::Skip("closed for lunch".into()),
                _ => PreToolCallAction::Continue,
            }
        })
        .post_tool_call_hook(|ctx: &mut PostToolCallContext| {
            ctx.result.content.push_str(" (audited)");
            PostToolCallAction::Continue
        });
    let catalog = ToolCatalog::new([counters("all", 1, &["allowed", "forbidden", "skipped"])]);
    let url = serve(catalog, options).await;
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    let mut call = CallToolRequestParams::new("allowed");
    call.arguments = json!({"why": "audit me"}).as_object().cloned();
    let allowed = client.call_tool(call).await.expect("allowed");
    assert_eq!(greeting(&allowed), "0 (audited)");
    let refused = client
        .call_tool(CallToolRequestParams::new("forbidden"))
        .await
        .expect_err("aborted by the hook");
    assert!(refused.to_string().contains("not on weekends"), "{refused}");
    let skipped = client
        .call_tool(CallToolRequestParams::new("skipped"))
        .await
        .expect("a result");
    assert_eq!(skipped.is_error, Some(true));
    assert!(
        greeting(&skipped).contains("a hook skipped it: closed for lunch"),
        "{skipped:?}"
    );
    // The hook saw every call with its input, the refused and skipped ones too.
    assert_eq!(
        *seen.lock().expect("audit"),
        [
            r#"allowed {"why":"audit me"}"#,
            "forbidden {}",
            "skipped {}"
        ]
    );
    client.cancel().await.expect("close");
}

/// A client whose person is away: it declares elicitation, says when it is asked, and never
/// answers; it passes on the reasons of the cancellations it is sent.
struct AwayClient {
    asked: Arc<tokio::sync::Notify>,
    cancelled: Option<tokio::sync::mpsc::UnboundedSender<Option<String>>>,
}

impl rmcp::ClientHandler for AwayClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "away", "version": "1"}
        }))
        .expect("client info")
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.asked.notify_one();
        std::future::pending().await
    }

    async fn on_cancelled(
        &self,
        params: rmcp::model::CancelledNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        if let Some(cancelled) = &self.cancelled {
            let _ = cancelled.send(params.reason);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_plugins_wait_for_an_answer_delays_no_other_plugins_requests() {
    use llm_worker::{ClientPolicy, Limits, SandboxPolicy};
    use rmcp::model::{
        CompleteRequestParams, GetPromptRequestParams, ReadResourceRequestParams, Reference,
    };
    use std::time::{Duration, Instant};
    // The conformance fixtures may ask a person, and have a minute for a call.
    let mut limits = Limits::default();
    limits.call_timeout = Duration::from_secs(60);
    let mut policy = SandboxPolicy::with_limits(limits);
    policy.client = ClientPolicy::default();
    let asking = llm_worker_tests::host()
        .load_with_policy(llm_worker_tests::plugin_path("conformance"), policy)
        .unwrap_or_else(|e| panic!("{e}"));
    let notes = llm_worker_tests::plugin("notes");
    let url = serve(
        ToolCatalog::from_plugins([&asking, &notes]),
        McpOptions::new("waits", "1"),
    )
    .await;
    let asked = Arc::new(tokio::sync::Notify::new());
    let client = AwayClient {
        asked: Arc::clone(&asked),
        cancelled: None,
    }
    .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
        url.as_str(),
    ))
    .await
    .expect("initialize");
    // The attack: the plugin says its prompts changed, then waits for an answer that never
    // comes, holding its instance. Every other plugin's prompt, read and completion used to
    // wait for it (the listing and routing entered each plugin's instance in turn) for its
    // whole time limit.
    client
        .call_tool(CallToolRequestParams::new("test_trigger_prompt_change"))
        .await
        .expect("the change");
    let waiting = tokio::spawn({
        let peer = client.peer().clone();
        async move {
            let mut call = CallToolRequestParams::new("test_elicitation");
            call.arguments = json!({"message": "Who are you?"}).as_object().cloned();
            peer.call_tool(call).await
        }
    });
    tokio::time::timeout(Duration::from_secs(30), asked.notified())
        .await
        .expect("the client was asked");
    // A bound far below the waiting plugin's minute and far above what these take.
    let quick = Duration::from_secs(20);
    let started = Instant::now();
    let review = client
        .get_prompt(GetPromptRequestParams::new("review"))
        .await
        .expect("notes' prompt");
    assert!(!review.messages.is_empty());
    let read = client
        .read_resource(ReadResourceRequestParams::new("notes://all"))
        .await
        .expect("notes' resource");
    assert_eq!(read.contents.len(), 1);
    // Another spelling of the URI (found as the plugin's) is read as the plugin spells it.
    for spelling in ["NOTES://all", "notes://%61ll"] {
        let again = client
            .read_resource(ReadResourceRequestParams::new(spelling))
            .await
            .unwrap_or_else(|e| panic!("{spelling}: {e}"));
        assert_eq!(again.contents, read.contents, "{spelling}");
    }
    let completed = client
        .complete(CompleteRequestParams::new(
            Reference::for_resource("notes://note/{number}"),
            rmcp::model::ArgumentInfo::new("number", ""),
        ))
        .await
        .expect("notes' completion");
    assert!(completed.completion.values.is_empty());
    // The lists are served, the waiting plugin's as last known.
    let prompts = client.list_all_prompts().await.expect("the prompts");
    assert!(prompts.iter().any(|p| p.name == "review"));
    assert!(prompts.iter().any(|p| p.name == "test_simple_prompt"));
    assert!(
        started.elapsed() < quick,
        "other plugins' requests waited {:?} for the plugin waiting for an answer",
        started.elapsed()
    );
    assert!(!waiting.is_finished(), "the question is still waiting");
    waiting.abort();
    client.cancel().await.expect("close");
}

/// A hook's `Skip` means the same to an embedder's `Worker` and to an MCP client: an error
/// result, giving the hook's reason, and the tool not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_is_the_same_answer_from_the_worker_and_over_mcp() {
    use llm_worker::{PreToolCallAction, ToolCall, ToolCallContext, Worker};
    fn pausing(ctx: &mut ToolCallContext) -> PreToolCallAction {
        match ctx.call.input.get("pause") {
            Some(_) => PreToolCallAction::Skip("counting is paused".into()),
            None => PreToolCallAction::Continue,
        }
    }
    const NAMES: &[&str] = &["count"];
    let mut worker = Worker::new();
    worker
        .register_tools(crate::counter_definitions(NAMES))
        .expect("register");
    worker.add_pre_tool_call_hook(pausing);
    let call = |input: serde_json::Value| ToolCall {
        id: "1".into(),
        name: "count".into(),
        input,
    };
    let from_worker = worker
        .execute_tool_calls(vec![call(json!({"pause": true}))])
        .await
        .expect("no abort")
        .remove(0);

    let options = McpOptions::new("skipping", "1").pre_tool_call_hook(pausing);
    let url = serve(ToolCatalog::new([counters("all", 1, NAMES)]), options).await;
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    let mut paused = CallToolRequestParams::new("count");
    paused.arguments = json!({"pause": true}).as_object().cloned();
    let over_mcp = client.call_tool(paused).await.expect("a result");

    assert!(from_worker.is_error, "{from_worker:?}");
    assert_eq!(over_mcp.is_error, Some(true), "{over_mcp:?}");
    assert_eq!(greeting(&over_mcp), from_worker.content);
    assert!(
        from_worker.content.contains("counting is paused"),
        "the hook's reason reaches the model: {}",
        from_worker.content
    );
    // The skipped calls did not run: both counters are still at 0.
    let counted = worker
        .execute_tool_calls(vec![call(json!({}))])
        .await
        .expect("no abort");
    assert_eq!(counted[0].content, "0");
    let counted = client
        .call_tool(CallToolRequestParams::new("count"))
        .await
        .expect("a result");
    assert_eq!(greeting(&counted), "0");
    client.cancel().await.expect("close");
}

/// A native tool with an output schema returns its object's JSON as text, as the spec's
/// `Tool::execute` does. A post-call hook redacting the structured value saw it over MCP and
/// saw none from the `Worker`: the secret it removes reached the model through the `Worker`.
/// The hook sees the same structured value either way, and the text follows its change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_redacts_a_native_tools_structured_value_from_the_worker_and_over_mcp() {
    use async_trait::async_trait;
    use llm_worker::{
        PostToolCallAction, PostToolCallContext, Tool, ToolCall, ToolDefinition, ToolError,
        ToolMeta, Worker,
    };
    struct Profile;
    #[async_trait]
    impl Tool for Profile {
        async fn execute(&self, _input_json: &str) -> Result<String, ToolError> {
            Ok(r#"{"name":"ada","secret":"s3cret"}"#.into())
        }
    }
    fn definitions() -> Vec<ToolDefinition> {
        let profile: ToolDefinition = Arc::new(|| {
            let meta = ToolMeta::new("profile")
                .description("A profile")
                .input_schema(json!({"type": "object"}))
                .output_schema(json!({
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "secret": {"type": "string"}}
                }));
            (meta, Arc::new(Profile) as Arc<dyn Tool>)
        });
        vec![profile]
    }
    fn redacting(ctx: &mut PostToolCallContext) -> PostToolCallAction {
        if let Some(serde_json::Value::Object(fields)) = &mut ctx.result.structured {
            fields.remove("secret");
        }
        PostToolCallAction::Continue
    }
    let mut worker = Worker::new();
    worker.register_tools(definitions()).expect("register");
    worker.add_post_tool_call_hook(redacting);
    let from_worker = worker
        .execute_tool_calls(vec![ToolCall {
            id: "1".into(),
            name: "profile".into(),
            input: json!({}),
        }])
        .await
        .expect("no abort")
        .remove(0);
    assert_eq!(from_worker.structured, Some(json!({"name": "ada"})));
    assert!(!from_worker.content.contains("s3cret"), "{from_worker:?}");

    let options = McpOptions::new("redacting", "1").post_tool_call_hook(redacting);
    let client = crate::client_of(
        ToolCatalog::new([llm_worker::mcp::ToolGroup::new("profiles", 1, definitions)]),
        options,
    )
    .await;
    let over_mcp = client
        .call_tool(CallToolRequestParams::new("profile"))
        .await
        .expect("a result");
    assert_eq!(
        over_mcp.structured_content,
        Some(json!({"name": "ada"})),
        "{over_mcp:?}"
    );
    assert!(!format!("{over_mcp:?}").contains("s3cret"), "{over_mcp:?}");
    client.cancel().await.expect("close");
}

/// A plugin's call asks the user a question and returns without the answer: the form is
/// withdrawn at the client (`notifications/cancelled`), not left open for a call that is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_left_behind_by_its_call_is_cancelled_at_the_client() {
    use llm_worker::mcp::McpServer;
    let asker = llm_worker_tests::plugin("asker");
    let server = McpServer::new(
        &ToolCatalog::from_plugins([&asker]),
        McpOptions::new("withdrawn", "1"),
    );
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(server.serve(server_end, std::future::pending::<()>()));
    let asked = Arc::new(tokio::sync::Notify::new());
    let (cancelled, mut cancellations) = tokio::sync::mpsc::unbounded_channel();
    let client = AwayClient {
        asked: Arc::clone(&asked),
        cancelled: Some(cancelled),
    }
    .serve(client_end)
    .await
    .expect("initialize");
    let mut call = CallToolRequestParams::new("ask_and_leave");
    call.arguments = json!({"message": "Still there?"}).as_object().cloned();
    let left = client.call_tool(call).await.expect("tools/call");
    assert_eq!(greeting(&left), "left");
    llm_worker_tests::wait::within("the client to be asked", asked.notified()).await;
    let reason =
        llm_worker_tests::wait::within("the question's cancellation", cancellations.recv())
            .await
            .expect("a cancellation");
    assert!(
        reason.is_some_and(|reason| reason.contains("ended before the answer came")),
        "the reason says why"
    );
    client.cancel().await.expect("close");
    serving.abort();
}

/// A resource read (a prompt rendering, a completion likewise) of a plugin withdrawn under
/// `--watch` while the read waits for the client's answer: only tool calls watched their
/// plugin, so the read went on with the withdrawn revision's instance (with its grants and
/// secrets) for as long as answers kept its deadline moving. It now ends as the revision goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_a_withdrawn_plugin_ends_with_it() {
    use llm_worker::mcp::McpServer;
    use rmcp::model::ReadResourceRequestParams;
    let asker = llm_worker_tests::plugin("asker");
    let catalog = ToolCatalog::from_plugins([&asker]);
    let server = McpServer::new(&catalog, McpOptions::new("withdrawn", "1"));
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(server.serve(server_end, std::future::pending::<()>()));
    let asked = Arc::new(tokio::sync::Notify::new());
    let client = AwayClient {
        asked: Arc::clone(&asked),
        cancelled: None,
    }
    .serve(client_end)
    .await
    .expect("initialize");
    let withdraw = async {
        llm_worker_tests::wait::within("the client to be asked", asked.notified()).await;
        catalog.replace([]);
    };
    let (read, ()) = tokio::join!(
        llm_worker_tests::wait::within(
            "the read to end",
            client.read_resource(ReadResourceRequestParams::new("asker://name")),
        ),
        withdraw
    );
    let said = format!("{read:?}");
    assert!(said.contains("no longer served"), "{said}");
    client.cancel().await.expect("close");
    serving.abort();
}

/// The attack: a progress token of megabytes, which the server echoes in every progress report
/// of its request, each report then held for a client that does not read. A string token
/// longer than the longest id the server takes (256 bytes) is not used: the call is answered
/// without progress. A token of that length is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_token_longer_than_an_id_is_not_used() {
    use tokio::io::AsyncWriteExt as _;
    let conformance = llm_worker_tests::plugin("conformance");
    let (client, server) = tokio::io::duplex(1 << 20);
    let (server_input, server_output) = tokio::io::split(server);
    let serving = tokio::spawn(
        llm_worker::mcp::McpServer::new(
            &ToolCatalog::from_plugins([&conformance]),
            McpOptions::new("progress", "1"),
        )
        .serve_lines(server_input, server_output, std::future::pending()),
    );
    let (answers, mut requests) = tokio::io::split(client);
    let mut answers = tokio::io::BufReader::new(answers);
    for line in [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    ] {
        requests.write_all(line.as_bytes()).await.expect("write");
        requests.write_all(b"\n").await.expect("write");
    }
    crate::embedding::answer(&mut answers, r#""id":0"#).await;
    for (id, length, used) in [(1, 257, false), (2, 256, true)] {
        let token = "p".repeat(length);
        let call = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "test_tool_with_progress", "arguments": {},
                       "_meta": {"progressToken": token}},
        });
        requests
            .write_all(format!("{call}\n").as_bytes())
            .await
            .expect("write");
        // A request's reports are all sent before its answer.
        let mut progress = 0;
        loop {
            let line = crate::embedding::answer(&mut answers, "").await;
            let message: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
            if message["id"] == json!(id) {
                assert!(line.contains("Progress test completed"), "{line}");
                break;
            }
            if message["method"] == "notifications/progress" {
                assert_eq!(message["params"]["progressToken"], json!(token), "{line}");
                progress += 1;
            }
        }
        assert_eq!(
            progress > 0,
            used,
            "a token of {length} bytes: {progress} reports"
        );
    }
    serving.abort();
}
