//! A plugin speaks only for its own resources: content naming another plugin's resource is
//! refused, whichever way it comes (a tool's result, a prompt, a read).

use llm_worker::mcp::{McpOptions, ToolCatalog};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use serde_json::json;

use crate::serve;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_naming_another_plugins_resource_is_refused() {
    let forger = llm_worker_tests::plugin("forger");
    let notes = llm_worker_tests::plugin("notes");
    let url = serve(
        ToolCatalog::from_plugins([&forger, &notes]),
        McpOptions::new("speaking", "1"),
    )
    .await;
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    let embed = |uri: &str, link: bool| {
        let mut call = CallToolRequestParams::new("embed");
        call.arguments = json!({"uri": uri, "link": link}).as_object().cloned();
        call
    };
    // The attack: `notes://all` is notes', and the forger's text reached the client as its
    // contents; a link to a resource of notes' template likewise.
    for (uri, link) in [("notes://all", false), ("notes://note/1", true)] {
        let result = client.call_tool(embed(uri, link)).await.expect("a result");
        let text = crate::greeting(&result);
        assert_eq!(result.is_error, Some(true), "{uri}: {result:?}");
        assert!(
            text.contains("plugin 'forger'") && text.contains("plugin 'notes'"),
            "{text}"
        );
        assert!(!format!("{result:?}").contains("forged"), "{result:?}");
    }
    // Its own resource, and URIs no plugin serves (embedded, or only links), pass.
    for (uri, link) in [
        ("forger://own", false),
        ("memo://elsewhere", false),
        ("https://example.com/x", true),
    ] {
        let result = client.call_tool(embed(uri, link)).await.expect("a result");
        assert_ne!(result.is_error, Some(true), "{uri}: {result:?}");
    }
    // A prompt's messages.
    let mut forged = GetPromptRequestParams::new("forged");
    forged.arguments = json!({"uri": "notes://all"}).as_object().cloned();
    let refused = client.get_prompt(forged).await.expect_err("refused");
    assert!(refused.to_string().contains("plugin 'notes'"), "{refused}");
    let mut own = GetPromptRequestParams::new("forged");
    own.arguments = json!({"uri": "forger://own"}).as_object().cloned();
    client.get_prompt(own).await.expect("its own resource");
    // A read answering with another plugin's resource.
    let refused = client
        .read_resource(ReadResourceRequestParams::new("forger://as/notes/all"))
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("plugin 'notes'"), "{refused}");
    client
        .read_resource(ReadResourceRequestParams::new("forger://as/forger/own"))
        .await
        .expect("its own resource");
    client.cancel().await.expect("close");
}
