//! Notices stay in their session: a subscription stream is told what its own session's (or,
//! stateless, its own caller's) calls made plugins say, never another client's.

use llm_worker::mcp::{HttpOptions, McpOptions, ToolCatalog};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ProtocolVersion, ServerNotification, SubscriptionFilter};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

const ALICE: &str = "alice-token-0123456789abcdef0123456789";
const BOB: &str = "bob-token-0123456789abcdef0123456789ab";

fn config(url: &str, token: &str) -> StreamableHttpClientTransportConfig {
    StreamableHttpClientTransportConfig::with_uri(url).auth_header(token)
}

/// A stateless (2026-07-28) client bearing `token`.
pub(crate) async fn stateless(
    url: &str,
    token: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    ().serve_with_lifecycle(
        StreamableHttpClientTransport::from_config(config(url, token)),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("server/discover")
}

/// A stream of what `client` is told of changes of `notes://all`.
pub(crate) async fn listen_to_notes(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
) -> rmcp::service::Subscription {
    listen(client, false).await
}

/// A stream of what `client` is told of changes of `notes://all`, and of its tools if `tools`.
async fn listen(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tools: bool,
) -> rmcp::service::Subscription {
    let filter = SubscriptionFilter::builder().resource_subscription("notes://all");
    let filter = if tools {
        filter.tools_list_changed()
    } else {
        filter
    };
    client
        .peer()
        .listen(filter.build())
        .await
        .expect("subscriptions/listen")
}

pub(crate) fn add_note(text: &str) -> CallToolRequestParams {
    let mut call = CallToolRequestParams::new("add_note");
    call.arguments = json!({ "text": text }).as_object().cloned();
    call
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_hears_only_its_own_callers_notices() {
    let url = crate::serve_with(
        ToolCatalog::from_plugins([&llm_worker_tests::plugin("notes")]),
        McpOptions::new("notices", "1"),
        HttpOptions::default().tokens([ALICE, BOB]),
    )
    .await;
    // Bob listens, stateless, for changes of notes' list.
    let bob = stateless(&url, BOB).await;
    let mut heard = listen_to_notes(&bob).await;
    // The attack: Alice's session — and Alice's stateless requests — add notes; Bob's stream
    // used to be told of each (`notifications/resources/updated`), of instances he cannot see.
    let alice = ()
        .serve(StreamableHttpClientTransport::from_config(config(
            &url, ALICE,
        )))
        .await
        .expect("initialize");
    alice.call_tool(add_note("alice's")).await.expect("a call");
    alice.cancel().await.expect("close");
    let alice = stateless(&url, ALICE).await;
    alice.call_tool(add_note("alice's")).await.expect("a call");
    alice.cancel().await.expect("close");
    // Bob's own stateless call: his stream hears of it, and of nothing before it.
    bob.call_tool(add_note("bob's")).await.expect("a call");
    hears_one_change_of_notes(&mut heard).await;
    drop(heard);
    bob.cancel().await.expect("close");
}

/// Waits for `heard` to be told of one change of `notes://all` (Bob's own call, made last), and
/// checks it is told of no other (another's call, made before, would have come first).
async fn hears_one_change_of_notes(heard: &mut rmcp::service::Subscription) {
    let updated = |notification: &ServerNotification| matches!(notification, ServerNotification::ResourceUpdatedNotification(n) if n.params.uri == "notes://all");
    let first = tokio::time::timeout(std::time::Duration::from_secs(30), heard.next())
        .await
        .expect("Bob hears of his own call")
        .expect("the stream")
        .expect("a notification");
    assert!(updated(&first), "{first:?}");
    // Notices leave in order: any of Alice's would have come before Bob's.
    let more = tokio::time::timeout(std::time::Duration::from_secs(1), heard.next()).await;
    assert!(
        !matches!(&more, Ok(Ok(Some(n))) if updated(n)),
        "Bob heard of another's call: {more:?}"
    );
}

/// Under an access policy, a listener hears of changes of the tools its identity may use only:
/// every change of the catalog reached every listener (a plugin only Alice is granted being
/// loaded told Bob something changed), and the listener's identity was never bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_hears_only_of_tools_its_identity_may_use() {
    use llm_worker::mcp::{AccessPolicy, BearerToken, ToolGroup};
    let policy = AccessPolicy::parse(
        "[[grant]]\nwho = [\"token:alice\"]\ntools = [\"*\"]\n\n\
         [[grant]]\nwho = [\"token:bob\"]\ntools = [\"notes/*\", \"greet/*\"]\n",
    )
    .expect("a policy");
    let notes = ToolGroup::plugin(&llm_worker_tests::plugin("notes"));
    let catalog = ToolCatalog::new([notes.clone()]);
    let url = crate::serve_with(
        catalog.clone(),
        McpOptions::new("notices", "1").access(policy),
        HttpOptions::default().named_tokens([
            BearerToken::new("alice", ALICE),
            BearerToken::new("bob", BOB),
        ]),
    )
    .await;
    let bob = stateless(&url, BOB).await;
    let mut heard = listen(&bob, true).await;
    // A plugin Bob is not granted comes: nothing for him. His own call's notice marks the
    // place in his stream after which the change would have been told.
    let counter = ToolGroup::plugin(&llm_worker_tests::plugin("counter"));
    catalog.replace([notes.clone(), counter.clone()]);
    bob.call_tool(add_note("bob's")).await.expect("a call");
    let listed = |notification: &ServerNotification| {
        matches!(
            notification,
            ServerNotification::ToolListChangedNotification(_)
        )
    };
    let long = std::time::Duration::from_secs(30);
    let first = tokio::time::timeout(long, heard.next())
        .await
        .expect("Bob hears of his own call")
        .expect("the stream")
        .expect("a notification");
    assert!(!listed(&first), "Bob was told of Alice's plugin: {first:?}");
    let more = tokio::time::timeout(std::time::Duration::from_secs(1), heard.next()).await;
    assert!(
        !matches!(&more, Ok(Ok(Some(n))) if listed(n)),
        "Bob was told of Alice's plugin: {more:?}"
    );
    // A plugin he is granted: he is told.
    catalog.replace([
        notes,
        counter,
        ToolGroup::plugin(&llm_worker_tests::plugin("greet")),
    ]);
    let told = tokio::time::timeout(long, heard.next())
        .await
        .expect("Bob hears of greet")
        .expect("the stream")
        .expect("a notification");
    assert!(listed(&told), "{told:?}");
    drop(heard);
    bob.cancel().await.expect("close");
}

/// Over a transport other than HTTP every client is the same anonymous caller: two stateless
/// connections served from one set of options (as an embedder serves its connections) were one
/// caller, and a listener on one heard of the other's calls. The connection is the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_connection_hears_only_its_own_notices() {
    let catalog = ToolCatalog::from_plugins([&llm_worker_tests::plugin("notes")]);
    let options = McpOptions::new("notices", "1");
    let mut stops = Vec::new();
    let mut connect = || {
        let server = llm_worker::mcp::McpServer::new(&catalog, options.clone());
        let (client_end, server_end) = tokio::io::duplex(64 * 1024);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(server_end, async {
            let _ = stopped.await;
        }));
        stops.push(stop);
        ().serve_with_lifecycle(
            client_end,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
    };
    let (alice, bob) = (connect(), connect());
    let (alice, bob) = (
        alice.await.expect("server/discover"),
        bob.await.expect("server/discover"),
    );
    let mut heard = listen_to_notes(&bob).await;
    alice.call_tool(add_note("alice's")).await.expect("a call");
    bob.call_tool(add_note("bob's")).await.expect("a call");
    hears_one_change_of_notes(&mut heard).await;
    drop(heard);
    for stop in stops {
        let _ = stop.send(());
    }
}

/// A listener hears of changes of the resources its identity may read only: Bob, granted one
/// tool of notes (not its resources: `resources/read` of `notes://all` is refused him), was
/// told each time `notes://all` changed while his stream asked for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_hears_nothing_of_resources_its_identity_may_not_read() {
    use llm_worker::mcp::{AccessPolicy, BearerToken, ToolGroup};
    let policy = AccessPolicy::parse(
        "[[grant]]\nwho = [\"token:bob\"]\ntools = [\"notes/add_note\", \"greet/*\"]\n",
    )
    .expect("a policy");
    let notes = ToolGroup::plugin(&llm_worker_tests::plugin("notes"));
    let catalog = ToolCatalog::new([notes.clone()]);
    let url = crate::serve_with(
        catalog.clone(),
        McpOptions::new("notices", "1").access(policy),
        HttpOptions::default().named_tokens([BearerToken::new("bob", BOB)]),
    )
    .await;
    let bob = stateless(&url, BOB).await;
    let read = bob
        .read_resource(rmcp::model::ReadResourceRequestParams::new("notes://all"))
        .await;
    assert!(read.is_err(), "Bob may not read notes' resources: {read:?}");
    let mut heard = listen(&bob, true).await;
    // His call changes `notes://all` (the plugin says so); then a plugin he is granted comes,
    // which he is told of: the first thing he hears.
    bob.call_tool(add_note("bob's")).await.expect("a call");
    catalog.replace([notes, ToolGroup::plugin(&llm_worker_tests::plugin("greet"))]);
    let first = tokio::time::timeout(std::time::Duration::from_secs(30), heard.next())
        .await
        .expect("Bob hears of greet")
        .expect("the stream")
        .expect("a notification");
    assert!(
        matches!(first, ServerNotification::ToolListChangedNotification(_)),
        "Bob was told of a resource he may not read: {first:?}"
    );
    drop(heard);
    bob.cancel().await.expect("close");
}
