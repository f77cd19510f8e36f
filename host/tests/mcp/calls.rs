//! Calls through the server: a slow plugin delays no one else, and the operator's hooks see
//! and can refuse every call.

use std::sync::Arc;

use llm_worker::mcp::{McpOptions, ToolCatalog};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::ClientServiceExt;
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
        let client = ()
            .serve_with_lifecycle(
                rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str()),
                rmcp::service::ClientLifecycleMode::Discover {
                    preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("server/discover");
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
                "skipped" => PreToolCallAction::Skip,
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
        greeting(&skipped).contains("skipped by a hook"),
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
