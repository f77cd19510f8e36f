//! A plugin speaks only for its own resources: content naming another plugin's resource is
//! refused, whichever way it comes (a tool's result, a prompt, a read).

use std::sync::Arc;
use std::time::Duration;

use llm_worker::mcp::{McpOptions, ToolCatalog};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams,
    SubscribeRequestParams,
};
use serde_json::json;

use crate::serve;

/// A client of a server of the forger and notes, with `options`.
async fn forger_and_notes(
    options: McpOptions,
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    crate::client_of(
        ToolCatalog::from_plugins([
            &llm_worker_tests::plugin("forger"),
            &llm_worker_tests::plugin("notes"),
        ]),
        options,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_naming_another_plugins_resource_is_refused() {
    let client = forger_and_notes(McpOptions::new("speaking", "1")).await;
    let embed = |uri: &str, link: bool| {
        let mut call = CallToolRequestParams::new("embed");
        call.arguments = json!({"uri": uri, "link": link}).as_object().cloned();
        call
    };
    // The attack: `notes://all` is notes', and the forger's text reached the client as its
    // contents; a link to a resource of notes' template likewise; and other spellings of them
    // (a client may take them for the same URI, as RFC 3986 does).
    for (uri, link) in [
        ("notes://all", false),
        ("notes://note/1", true),
        ("NOTES://all", false),
        ("notes://%61ll", false),
        ("Notes://NOTE/1", true),
        // Spellings clients' URL parsers read as notes' own: an empty port, an empty user,
        // dot segments (escaped too).
        ("notes://all:", false),
        ("notes://@all", false),
        ("notes://note/./1", true),
        ("notes://note/%2E/1", false),
        ("notes://note/x/../1", true),
    ] {
        let result = client.call_tool(embed(uri, link)).await.expect("a result");
        let text = crate::greeting(&result);
        assert_eq!(result.is_error, Some(true), "{uri}: {result:?}");
        assert!(
            text.contains("plugin 'forger'") && text.contains("plugin 'notes'"),
            "{text}"
        );
        assert!(!format!("{result:?}").contains("forged"), "{result:?}");
    }
    // The attack: a URI that only looks like notes' (a Cyrillic `а` in `notes://аll`) is no
    // one's, and passed. A URI a plugin gives is ASCII, as RFC 3986 writes URIs.
    for link in [false, true] {
        let result = client
            .call_tool(embed("notes://\u{430}ll", link))
            .await
            .expect("a result");
        let text = crate::greeting(&result);
        assert_eq!(result.is_error, Some(true), "{result:?}");
        assert!(text.contains("not ASCII"), "{text}");
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
    // The attack: a result naming thousands of URIs, each a look at every plugin's offerings
    // (host CPU, outside the plugin's time limit). As many as a plugin may offer resources
    // pass; more are refused.
    let links = |count: u32| {
        let mut call = CallToolRequestParams::new("links");
        call.arguments = json!({ "count": count }).as_object().cloned();
        call
    };
    let most = client.call_tool(links(1000)).await.expect("a result");
    assert_ne!(most.is_error, Some(true), "{:?}", most.is_error);
    assert_eq!(most.content.len(), 1000);
    let more = client.call_tool(links(1001)).await.expect("a result");
    assert_eq!(more.is_error, Some(true));
    let text = crate::greeting(&more);
    assert!(text.contains("names more than 1000 resources"), "{text}");
    // A URI that reorders what a client shows, or is not one word, is refused as a listed one
    // would be.
    for uri in ["memo://a\u{202E}txt.exe", "memo://a b", "memo://a\nb"] {
        let result = client.call_tool(embed(uri, true)).await.expect("a result");
        assert_eq!(result.is_error, Some(true), "{uri:?}: {result:?}");
        let text = crate::greeting(&result);
        assert!(text.contains("not a URI a client may be shown"), "{text}");
        assert!(
            !text.contains('\u{202E}') && !text.contains('\n'),
            "{text:?}"
        );
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

/// The MIME type of what a read or a prompt gives is held to the rule a listed resource's is,
/// as a tool result's is: one carrying a line break or an escape sequence (which a client may
/// write into a header or a terminal) is refused, naming the plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_prompts_are_held_to_the_mime_type_rule() {
    let client = forger_and_notes(McpOptions::new("speaking", "1")).await;
    for bad in [
        "text%2Fplain%0AX-Injected:%201",
        "text%2Fplain%1B%5D8;;x%07",
        "plain",
    ] {
        let refused = client
            .read_resource(ReadResourceRequestParams::new(format!(
                "forger://as/mime/{bad}"
            )))
            .await
            .expect_err("refused");
        let text = refused.to_string();
        assert!(
            text.contains("plugin 'forger'") && text.contains("MIME type"),
            "{bad}: {text}"
        );
        assert!(!text.contains('\n') && !text.contains('\u{1b}'), "{text:?}");
    }
    let read = client
        .read_resource(ReadResourceRequestParams::new(
            "forger://as/mime/text%2Fmarkdown",
        ))
        .await
        .expect("a MIME type a listing could have");
    assert_eq!(read.contents.len(), 1);
    for bad in [
        "image/png\nX-Injected: 1",
        "image/png\u{1b}]8;;x\u{7}",
        "png",
    ] {
        let mut prompt = GetPromptRequestParams::new("forged");
        prompt.arguments = json!({"uri": format!("mime:{bad}")}).as_object().cloned();
        let refused = client.get_prompt(prompt).await.expect_err("refused");
        let text = refused.to_string();
        assert!(
            text.contains("plugin 'forger'") && text.contains("MIME type"),
            "{bad:?}: {text}"
        );
    }
    let mut fine = GetPromptRequestParams::new("forged");
    fine.arguments = json!({"uri": "mime:image/png"}).as_object().cloned();
    let prompt = client.get_prompt(fine).await.expect("an image prompt");
    assert_eq!(prompt.messages.len(), 1);
    client.cancel().await.expect("close");
}

/// The same attacks under an access policy that grants the forger whole and notes only in
/// part: whose a resource is was decided among the plugins granted whole, so that the forger's
/// content naming `notes://all` passed, and once its list claimed it, a read of it went to the
/// forger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_granted_whole_cannot_take_the_resources_of_one_granted_in_part() {
    use llm_worker::mcp::{AccessPolicy, BearerToken, HttpOptions};
    let policy = AccessPolicy::parse(
        "[[grant]]\nwho = [\"token:alice\"]\ntools = [\"forger/*\", \"notes/list_notes\"]\n",
    )
    .expect("a policy");
    let url = crate::serve_with(
        ToolCatalog::from_plugins([
            &llm_worker_tests::plugin("forger"),
            &llm_worker_tests::plugin("notes"),
        ]),
        McpOptions::new("speaking", "1").access(policy),
        HttpOptions::default().named_tokens([BearerToken::new("alice", crate::access::ALICE)]),
    )
    .await;
    let alice = crate::access::client(&url, crate::access::ALICE).await;
    let mut forged = GetPromptRequestParams::new("forged");
    forged.arguments = json!({"uri": "notes://all"}).as_object().cloned();
    let refused = alice.get_prompt(forged).await.expect_err("refused");
    assert!(refused.to_string().contains("plugin 'notes'"), "{refused}");
    let refused = alice
        .read_resource(ReadResourceRequestParams::new("forger://as/notes/all"))
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("plugin 'notes'"), "{refused}");
    // The forger's list claims `notes://all`: not listed as the forger's, and a read does not
    // go to it (notes' resources are not Alice's to read: not found).
    alice
        .call_tool(CallToolRequestParams::new("claim"))
        .await
        .expect("claimed");
    let listed = alice.list_all_resources().await.expect("resources/list");
    assert!(
        !listed.iter().any(|resource| resource.uri == "notes://all"),
        "{listed:?}"
    );
    let read = alice
        .read_resource(ReadResourceRequestParams::new("notes://all"))
        .await;
    assert!(!format!("{read:?}").contains("forged"), "{read:?}");
    assert!(
        read.is_err_and(|error| error.to_string().contains("Resource not found")),
        "a read of notes' resource"
    );
    alice.cancel().await.expect("close");
}

/// Counts the notices of a client: `resources/updated` of `notes://all`, and resource list
/// changes.
#[derive(Clone, Default)]
struct Notices {
    updated: Arc<std::sync::atomic::AtomicUsize>,
    relisted: Arc<tokio::sync::Notify>,
}

impl rmcp::ClientHandler for Notices {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        // A session of the revision with `resources/subscribe`.
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "notices", "version": "1"}
        }))
        .expect("client info")
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        if params.uri == "notes://all" {
            self.updated
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    async fn on_resource_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.relisted.notify_one();
    }
}

/// A resource list a plugin gives while serving cannot take another plugin's resource: once
/// the forger's list names notes' `notes://all`, the list shows it once (notes'), a read goes
/// to notes, the forger's content naming it is still refused, and its notices of it never reach
/// a subscriber, while notes' do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_list_cannot_take_another_plugins_resource() {
    use std::sync::atomic::Ordering;
    let forger = llm_worker_tests::plugin("forger");
    let notes = llm_worker_tests::plugin("notes");
    let url = serve(
        ToolCatalog::from_plugins([&forger, &notes]),
        McpOptions::new("speaking", "1"),
    )
    .await;
    let notices = Notices::default();
    let client = notices
        .clone()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    // Spelt otherwise than notes spells it: a subscription is kept as URIs are compared, so
    // it gets the notices of `notes://all` (it got none when kept as written).
    #[allow(deprecated)] // Legacy in 2026-07-28; this session is 2025-11-25's.
    client
        .subscribe(SubscribeRequestParams::new("NOTES://%61ll"))
        .await
        .expect("subscribe");
    // A URI over the length of one (escaped at length, so that a template matches what it
    // decodes to) is refused: kept for the session's life, it took kilobytes each.
    #[allow(deprecated)]
    let long = client
        .subscribe(SubscribeRequestParams::new(format!(
            "notes://note/{}",
            "%31".repeat(2000)
        )))
        .await;
    assert!(
        format!("{long:?}").contains("cannot subscribe to this URI"),
        "{long:?}"
    );
    let claim = || async {
        let claimed = client
            .call_tool(CallToolRequestParams::new("claim"))
            .await
            .expect("claim");
        assert_ne!(claimed.is_error, Some(true), "{claimed:?}");
        tokio::time::timeout(Duration::from_secs(10), notices.relisted.notified())
            .await
            .expect("the forger's resource list changed");
    };
    claim().await;
    // The forger's list is read again: it names `notes://all`.
    let listed = client.list_all_resources().await.expect("resources");
    let all: Vec<_> = listed.iter().filter(|r| r.uri == "notes://all").collect();
    assert_eq!(all.len(), 1, "{listed:?}");
    let read = client
        .read_resource(ReadResourceRequestParams::new("notes://all"))
        .await
        .expect("notes' resource is read");
    assert!(!format!("{read:?}").contains("forged"), "{read:?}");
    let mut embed = CallToolRequestParams::new("embed");
    embed.arguments = json!({"uri": "notes://all"}).as_object().cloned();
    let result = client.call_tool(embed).await.expect("a result");
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(
        crate::greeting(&result).contains("plugin 'notes'"),
        "{result:?}"
    );
    // Its notice of `notes://all`, now that its list names it; then notes' own.
    claim().await;
    let mut add = CallToolRequestParams::new("add_note");
    add.arguments = json!({"text": "milk"}).as_object().cloned();
    client.call_tool(add).await.expect("add a note");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while notices.updated.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "notes' notice never came"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.list_all_resources().await.expect("a round trip");
    assert_eq!(
        notices.updated.load(Ordering::SeqCst),
        1,
        "only notes' notice"
    );
    client.cancel().await.expect("close");
}

/// The attack: a plugin says its prompt list changed and lists a prompt another plugin offered
/// at load (notes' `review`): `prompts/get` of it failed as offered by two plugins (or went to
/// the forger), and the list showed a look-alike. The plugin that offered it at load keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_cannot_take_another_plugins_prompt_by_listing_it() {
    let audit = crate::Shared::default();
    let client = forger_and_notes(
        McpOptions::new("speaking", "1").audit(llm_worker::mcp::AuditLog::to_writer(audit.clone())),
    )
    .await;
    let claimed = client
        .call_tool(CallToolRequestParams::new("claim"))
        .await
        .expect("claim");
    assert_ne!(claimed.is_error, Some(true), "{claimed:?}");
    let listed = client.list_all_prompts().await.expect("prompts/list");
    assert_eq!(
        listed
            .iter()
            .filter(|prompt| prompt.name == "review")
            .count(),
        1,
        "{listed:?}"
    );
    let review = client
        .get_prompt(GetPromptRequestParams::new("review"))
        .await
        .expect("notes' review");
    assert!(!format!("{review:?}").contains("forged"), "{review:?}");
    client.cancel().await.expect("close");
    // The audit names the plugin that served it (it named the forger, first in order, whose
    // list named it too).
    let records = audit.records();
    let served: Vec<_> = records
        .iter()
        .filter(|record| record["event"] == "prompts/get")
        .map(|record| record["plugin"].clone())
        .collect();
    assert_eq!(served, [serde_json::json!("notes")], "{records:?}");
}

/// A plugin withdrawn while an operator's hook holds its call (under `--watch`: changed,
/// removed, its signer revoked) is still held to speaking for its own resources: its result
/// was checked against the plugins serving the tool when the call ended, and with none, passed
/// unchecked. Now the call of a withdrawn revision does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_withdrawn_during_its_call_still_speaks_only_for_its_own_resources() {
    let (forger, notes) = (
        llm_worker_tests::plugin("forger"),
        llm_worker_tests::plugin("notes"),
    );
    let catalog = ToolCatalog::from_plugins([&forger, &notes]);
    let (hook, arrived, release) = crate::WaitingHook::new();
    let options = McpOptions::new("speaking", "1").pre_tool_call_hook(hook);
    let url = serve(catalog.clone(), options).await;
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    let mut embed = CallToolRequestParams::new("embed");
    embed.arguments = json!({"uri": "notes://all", "link": false})
        .as_object()
        .cloned();
    let withdraw = async {
        arrived.notified().await;
        catalog.replace([llm_worker::mcp::ToolGroup::plugin(&notes)]);
        // The session has taken the change in: the forger's tool is gone from its list.
        let listed = client.list_all_tools().await.expect("tools/list");
        assert!(listed.iter().all(|tool| tool.name != "embed"), "{listed:?}");
        release.notify_one();
    };
    let (result, ()) = tokio::join!(client.call_tool(embed), withdraw);
    // The withdrawn revision does not run at all now (its result, were it let run, is checked
    // as the plugin's that served the tool when the call looked it up).
    let said = format!("{result:?}");
    assert!(
        said.contains("'embed' stopped: its plugin is no longer served"),
        "{said}"
    );
    assert!(!said.contains("forged"), "{said}");
    client.cancel().await.expect("close");
}

/// A plugin's error answering a read becomes the protocol error's message, which clients show
/// and servers log whole: 3 MB of it (up to the 4 MiB one host call may copy) reached the client (and rmcp's log, at `warn`) uncut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_error_answering_a_read_is_cut() {
    let client = forger_and_notes(McpOptions::new("speaking", "1")).await;
    let refused = client
        .read_resource(ReadResourceRequestParams::new("forger://as/error/3000000"))
        .await
        .expect_err("an error");
    let rmcp::ServiceError::McpError(error) = refused else {
        panic!("not a JSON-RPC error: {refused:?}");
    };
    assert!(error.message.len() < 5_000, "{} bytes", error.message.len());
    assert!(
        error
            .message
            .contains("cut: the plugin's error text was 3000000 bytes"),
        "{}",
        &error.message[error.message.len().saturating_sub(200)..]
    );
    client.cancel().await.expect("close");
}

/// The attack: an operator's pre-call hook renames calls (an alias, a prefix); the check that
/// a result names only its plugin's own resources looked the plugin up by the new name, so
/// the forger's call renamed to a tool of notes' passed as notes' and its forged
/// `notes://all` reached the client. The tool looked up runs, and its plugin is held to the
/// rule, whatever name a hook gives the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_a_hook_renamed_still_speaks_only_for_its_own_plugin() {
    use llm_worker::{PreToolCallAction, ToolCallContext};
    fn renaming(ctx: &mut ToolCallContext) -> PreToolCallAction {
        if ctx.call.name == "embed" {
            ctx.call.name = "add_note".into();
        }
        PreToolCallAction::Continue
    }
    let client =
        forger_and_notes(McpOptions::new("speaking", "1").pre_tool_call_hook(renaming)).await;
    let mut call = CallToolRequestParams::new("embed");
    call.arguments = json!({"uri": "notes://all", "link": false})
        .as_object()
        .cloned();
    let result = client.call_tool(call).await.expect("a result");
    let text = crate::greeting(&result);
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(
        text.contains("plugin 'forger'") && text.contains("plugin 'notes'"),
        "{text}"
    );
    assert!(!format!("{result:?}").contains("forged"), "{result:?}");
    // Its own resource passes, renamed too: the forger's tool ran, not notes'.
    let mut own = CallToolRequestParams::new("embed");
    own.arguments = json!({"uri": "forger://own", "link": false})
        .as_object()
        .cloned();
    let result = client.call_tool(own).await.expect("a result");
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert!(format!("{result:?}").contains("forged"), "{result:?}");
    client.cancel().await.expect("close");
}

/// Two groups offering one tool name: the session serves one group's tool under it, and the
/// call is held to that group's rules, not to those of another group offering the name. Here
/// the forger's `embed` is served, while a native group listed before it in the catalog (the
/// operator's code, whose results may name any resource) offers an `embed` too: taken for the
/// native group's, the forger's forged `notes://all` would pass unchecked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_two_groups_offer_is_held_to_the_served_groups_rules() {
    use llm_worker::mcp::ToolGroup;
    let client = crate::client_of(
        ToolCatalog::new([
            crate::counters("zz-operator", 1, &["embed"]),
            ToolGroup::plugin(&llm_worker_tests::plugin("forger")),
            ToolGroup::plugin(&llm_worker_tests::plugin("notes")),
        ]),
        McpOptions::new("speaking", "1"),
    )
    .await;
    let embed = |uri: &str| {
        let mut call = CallToolRequestParams::new("embed");
        call.arguments = json!({"uri": uri, "link": false}).as_object().cloned();
        call
    };
    // The forger's tool is the one served: its own resource comes back, not a count.
    let own = client
        .call_tool(embed("forger://own"))
        .await
        .expect("a result");
    assert_eq!(own.is_error, Some(false), "{own:?}");
    assert!(format!("{own:?}").contains("forger://own"), "{own:?}");
    let forged = client
        .call_tool(embed("notes://all"))
        .await
        .expect("a result");
    let text = crate::greeting(&forged);
    assert_eq!(forged.is_error, Some(true), "{forged:?}");
    assert!(
        text.contains("plugin 'forger'") && text.contains("plugin 'notes'"),
        "{text}"
    );
    assert!(!format!("{forged:?}").contains("forged"), "{forged:?}");
    client.cancel().await.expect("close");
}
