//! The catalog as sessions see it: paginated lists, replaced groups, a tool name offered twice.

use llm_worker::mcp::{McpOptions, ToolCatalog};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, PaginatedRequestParams};

use crate::{counters, serve};

async fn count(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &'static str,
) -> String {
    let result = client
        .call_tool(CallToolRequestParams::new(tool))
        .await
        .expect("call");
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_paginated() {
    let catalog = ToolCatalog::new([counters("all", 1, &["e", "d", "c", "b", "a"])]);
    let url = serve(catalog, McpOptions::new("paged", "1").page_size(2)).await;
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let mut request = PaginatedRequestParams::default();
        request.cursor = cursor;
        let page = client.list_tools(Some(request)).await.expect("tools/list");
        pages.push(
            page.tools
                .iter()
                .map(|t| t.name.to_string())
                .collect::<Vec<_>>(),
        );
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(pages, [vec!["a", "b"], vec!["c", "d"], vec!["e"]]);
    let mut bad = PaginatedRequestParams::default();
    bad.cursor = Some("not-ours".into());
    assert!(client.list_tools(Some(bad)).await.is_err());
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_the_catalog_keeps_unchanged_groups_in_every_session() {
    let catalog = ToolCatalog::new([counters("one", 1, &["one"]), counters("two", 1, &["two"])]);
    let url = serve(catalog.clone(), McpOptions::new("replace", "1")).await;
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    assert_eq!(count(&client, "one").await, "0");
    assert_eq!(count(&client, "two").await, "0");
    // "one" unchanged, "two" at a new revision, "three" new.
    catalog.replace([
        counters("one", 1, &["one"]),
        counters("two", 2, &["two"]),
        counters("three", 1, &["three"]),
    ]);
    assert_eq!(count(&client, "one").await, "1", "unchanged: state kept");
    assert_eq!(
        count(&client, "two").await,
        "0",
        "changed: a fresh instance"
    );
    assert_eq!(count(&client, "three").await, "0");
    client.cancel().await.expect("close");
}

#[test]
fn a_tool_name_offered_twice_is_served_once() {
    let host = llm_worker_tests::host();
    let counter = host
        .load(llm_worker_tests::plugin_path("counter"))
        .expect("load");
    let dir = llm_worker_tests::scratch_dir("counter-again");
    let copy = dir.join("counter2.wasm");
    std::fs::copy(llm_worker_tests::plugin_path("counter"), &copy).expect("copy");
    let again = host.load(&copy).expect("load");
    let catalog = ToolCatalog::from_plugins([&counter, &again]);
    let groups = catalog.groups();
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].name(), counter.path().display().to_string());
}

/// As a directory refuses both, a catalog (what `--watch` replaces as files come and go)
/// serves only the first of two plugins where a fixed resource URI of one is matched by a
/// template of the other (`lookalike`'s `notes://note/7` and `notes`' `notes://note/{id}`), or
/// where templates of both match one URI (`overlap`'s `notes://{kind}/{id}`).
#[test]
fn a_fixed_uri_another_plugins_template_matches_is_served_once() {
    let host = llm_worker_tests::host();
    let load = |name: &str| {
        host.load(llm_worker_tests::plugin_path(name))
            .expect("load")
    };
    let (notes, lookalike, overlap, counter) = (
        load("notes"),
        load("lookalike"),
        load("overlap"),
        load("counter"),
    );
    for (first, second) in [
        (&notes, &lookalike),
        (&lookalike, &notes),
        (&notes, &overlap),
        (&overlap, &notes),
    ] {
        let catalog = ToolCatalog::from_plugins([first, second, &counter]);
        let served: Vec<String> = catalog
            .groups()
            .iter()
            .map(|group| group.name().to_owned())
            .collect();
        assert_eq!(
            served,
            [
                first.path().display().to_string(),
                counter.path().display().to_string()
            ],
            "the first comes first"
        );
    }
}
