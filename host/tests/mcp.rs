//! The MCP server as a library (feature `mcp-http`): a catalog of native tools served over
//! streamable HTTP in-process, driven by rmcp's client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use llm_worker::mcp::{HttpOptions, McpOptions, ToolCatalog, ToolGroup};
use llm_worker::{Tool, ToolDefinition, ToolError, ToolMeta};
use llm_worker_tests::logs::logged;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, PaginatedRequestParams};
use rmcp::service::ClientServiceExt;
use serde_json::json;

/// Counts its calls.
struct Counter(AtomicUsize);

#[async_trait]
impl Tool for Counter {
    async fn execute(&self, _input_json: &str) -> Result<String, ToolError> {
        Ok(self.0.fetch_add(1, Ordering::SeqCst).to_string())
    }
}

/// A group of counters named `names`, at `revision`.
fn counters(group: &str, revision: u64, names: &'static [&'static str]) -> ToolGroup {
    ToolGroup::new(group, revision, move || {
        names
            .iter()
            .map(|name| {
                let definition: ToolDefinition = Arc::new(move || {
                    let meta = ToolMeta::new(*name)
                        .description("Counts")
                        .input_schema(json!({"type": "object"}));
                    (
                        meta,
                        Arc::new(Counter(AtomicUsize::new(0))) as Arc<dyn Tool>,
                    )
                });
                definition
            })
            .collect()
    })
}

async fn serve(catalog: ToolCatalog, options: McpOptions) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    tokio::spawn(llm_worker::mcp::serve_http(
        listener,
        catalog,
        options,
        // These tests are about MCP, not authentication: loopback without tokens.
        HttpOptions::default().no_auth(true),
    ));
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_without_tokens_needs_an_explicit_opt_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let refused = llm_worker::mcp::serve_http(
        listener,
        ToolCatalog::new([counters("all", 1, &["a"])]),
        McpOptions::new("open", "1"),
        HttpOptions::default(),
    )
    .await;
    let error = refused.expect_err("no tokens and no opt-out");
    assert!(
        matches!(error, llm_worker::mcp::McpError::NoAuthentication { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("no_auth"), "{error}");

    // The opt-out is for loopback only.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
        .await
        .expect("bind");
    let refused = llm_worker::mcp::serve_http(
        listener,
        ToolCatalog::new([counters("all", 1, &["a"])]),
        McpOptions::new("open", "1"),
        HttpOptions::default().no_auth(true),
    )
    .await;
    assert!(matches!(
        refused,
        Err(llm_worker::mcp::McpError::NoAuthentication { .. })
    ));
}

#[test]
fn a_persistent_token_is_kept_private_and_reused() {
    let dir = llm_worker_tests::scratch_dir("persistent-token");
    let path = dir.join("state").join("http-token");
    let first = llm_worker::mcp::persistent_token(&path).expect("generated");
    assert_eq!(first.len(), 64);
    assert_eq!(
        llm_worker::mcp::persistent_token(&path).expect("read again"),
        first,
        "a restarted server keeps its clients' token"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let parent = std::fs::metadata(dir.join("state"))
            .expect("dir")
            .permissions()
            .mode();
        assert_eq!(parent & 0o777, 0o700);
        // Readable by others: refused, not used.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let error = llm_worker::mcp::persistent_token(&path).expect_err("readable by others");
        assert!(error.to_string().contains("chmod 600"), "{error}");
        // A link planted under its name: refused, not followed.
        let planted = dir.join("planted");
        std::fs::write(dir.join("attacker-token"), "attacker\n").expect("write");
        std::fs::set_permissions(
            dir.join("attacker-token"),
            std::fs::Permissions::from_mode(0o600),
        )
        .expect("chmod");
        std::os::unix::fs::symlink(dir.join("attacker-token"), &planted).expect("link");
        let error = llm_worker::mcp::persistent_token(&planted).expect_err("a link");
        assert!(error.to_string().contains("link"), "{error}");
    }
}

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

fn greeting(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
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

/// A tool that counts how many of its instances were dropped (a session's end).
struct Tracked(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Tracked {
    async fn execute(&self, _input_json: &str) -> Result<String, ToolError> {
        Ok("tracked".into())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn tracked(dropped: &Arc<AtomicUsize>) -> ToolCatalog {
    let dropped = Arc::clone(dropped);
    ToolCatalog::new([ToolGroup::new("tracked", 1, move || {
        let dropped = Arc::clone(&dropped);
        let definition: ToolDefinition = Arc::new(move || {
            let meta = ToolMeta::new("tracked")
                .description("Tracked")
                .input_schema(json!({"type": "object"}));
            (
                meta,
                Arc::new(Tracked(Arc::clone(&dropped))) as Arc<dyn Tool>,
            )
        });
        vec![definition]
    })])
}

/// Waits until `dropped` counts at least one (within the tests' deadline).
async fn until_dropped(dropped: &AtomicUsize) {
    llm_worker_tests::wait::until("the session's tools to be dropped", || {
        dropped.load(Ordering::SeqCst) > 0
    })
    .await;
}

fn authorized(
    url: &str,
    token: &str,
) -> rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig {
    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url)
        .auth_header(token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedder_mounts_the_mcp_service_on_its_own_router_and_stops_it() {
    use http_body_util::BodyExt;
    use llm_worker::mcp::McpHttpService;

    // Mounting never makes it open: no tokens and no opt-out is refused.
    let open = McpHttpService::new(
        ToolCatalog::new([]),
        McpOptions::new("open", "1"),
        HttpOptions::default(),
    );
    assert!(open.is_err());
    // Nor does the loopback opt-out: a mounted service may be reached from anywhere.
    let open = McpHttpService::new(
        ToolCatalog::new([]),
        McpOptions::new("open", "1"),
        HttpOptions::default().no_auth(true),
    );
    assert!(open.is_err());

    let dropped = Arc::new(AtomicUsize::new(0));
    let mcp = McpHttpService::new(
        tracked(&dropped),
        McpOptions::new("mounted", "1"),
        HttpOptions::default().tokens(["embedder-token"]),
    )
    .expect("service");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // The embedder's own server and router: `/health` is theirs, `/mcp` is the MCP service.
    let router = mcp.clone();
    let server = tokio::spawn(async move {
        let mut stopped = std::pin::pin!(stopped);
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => accepted.expect("accept").0,
                _ = &mut stopped => break,
            };
            let router = router.clone();
            tokio::spawn(async move {
                let route = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let router = router.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                if request.uri().path() == "/health" {
                                    http::Response::new(
                                        http_body_util::Full::new(bytes::Bytes::from("ok")).boxed(),
                                    )
                                } else {
                                    router.handle(request).await
                                },
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), route)
                    .await;
            });
        }
        // Stopping: the embedder ends the MCP sessions with its own server.
        router.close();
    });

    let url = format!("http://{address}/mcp");
    assert!(
        ().serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str()
        ))
        .await
        .is_err(),
        "no token: refused, mounted or not"
    );
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_config(
            authorized(&url, "embedder-token"),
        ))
        .await
        .expect("initialize through the embedder's router");
    let result = client
        .call_tool(CallToolRequestParams::new("tracked"))
        .await
        .expect("call");
    assert_eq!(greeting(&result), "tracked");
    let mut health = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    tokio::io::AsyncWriteExt::write_all(
        &mut health,
        b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await
    .expect("send");
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut health, &mut answer)
        .await
        .expect("read");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
        "{answer}"
    );

    stop.send(()).expect("stop");
    server.await.expect("the embedder's server stopped");
    until_dropped(&dropped).await;
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_http_stops_when_told() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(llm_worker::mcp::serve_http_with_shutdown(
        listener,
        tracked(&dropped),
        McpOptions::new("stoppable", "1"),
        HttpOptions::default().tokens(["t0ken"]),
        async {
            let _ = stopped.await;
        },
    ));
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_config(
            authorized(&format!("http://{address}/"), "t0ken"),
        ))
        .await
        .expect("initialize");
    let result = client
        .call_tool(CallToolRequestParams::new("tracked"))
        .await
        .expect("call");
    assert_eq!(greeting(&result), "tracked");
    stop.send(()).expect("stop");
    server
        .await
        .expect("the server task")
        .expect("serve_http_with_shutdown returns Ok once stopped");
    // The session ended with the server, its tools dropped; nothing listens any more.
    until_dropped(&dropped).await;
    assert!(tokio::net::TcpStream::connect(address).await.is_err());
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dir_watcher_follows_the_directory_one_rescan_at_a_time() {
    use llm_worker::mcp::DirWatcher;
    let dir = llm_worker_tests::scratch_dir("dir-watcher");
    let copy = |plugin: &str, name: &str| {
        std::fs::copy(llm_worker_tests::plugin_path(plugin), dir.join(name)).expect("copy");
    };
    copy("counter", "counter.wasm");
    let host = llm_worker_tests::host().clone();
    let mut watcher =
        DirWatcher::load(host, dir.path(), llm_worker::LoadDirOptions::default()).expect("load");
    let names = |watcher: &DirWatcher| -> Vec<String> {
        watcher
            .groups()
            .iter()
            .map(|group| {
                std::path::Path::new(group.name())
                    .file_name()
                    .map(|name| name.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect()
    };
    assert_eq!(names(&watcher), ["counter.wasm"]);
    // Nothing changed: nothing is reloaded (the watcher says nothing).
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed && said.is_empty(), "{said:?}");

    copy("greet", "greet.wasm");
    assert!(watcher.rescan().await, "a plugin added");
    assert_eq!(names(&watcher), ["counter.wasm", "greet.wasm"]);
    let revision = watcher.groups()[1].revision();

    // A broken new version: looked at (the watcher says what it found), refused, the
    // working one kept.
    std::fs::write(dir.join("greet.wasm"), b"broken").expect("break");
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed, "the served plugins did not change");
    assert!(
        said.iter()
            .any(|line| line.starts_with("WARN") && line.contains("not a WebAssembly file")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|line| line.contains("the served plugins are unchanged")),
        "{said:?}"
    );
    assert_eq!(watcher.groups()[1].revision(), revision);

    // The same bytes again (a new modification time): reloaded, and no change either.
    copy("greet", "greet.wasm");
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed);
    assert!(
        said.iter()
            .any(|line| line.contains("the served plugins are unchanged")),
        "{said:?}"
    );
    assert_eq!(watcher.groups()[1].revision(), revision);

    std::fs::remove_file(dir.join("counter.wasm")).expect("remove");
    assert!(watcher.rescan().await, "a plugin removed");
    assert_eq!(names(&watcher), ["greet.wasm"]);
}

#[test]
fn a_changed_secret_is_a_new_revision() {
    use llm_worker::{HttpGrant, HttpSecret, Limits, SandboxPolicy};
    let with_secret = |value: &str| {
        let grant = HttpGrant::parse("https://api.example.com").expect("rule");
        let mut policy = SandboxPolicy::with_limits(Limits::default());
        policy.http.push(grant.clone());
        policy
            .http_secrets
            .push(HttpSecret::new(grant, "Authorization", value));
        let plugin = llm_worker_tests::host()
            .load_with_policy(llm_worker_tests::plugin_path("fetcher"), policy)
            .expect("load");
        ToolGroup::plugin(&plugin).revision()
    };
    let first = with_secret("Bearer one");
    assert_eq!(
        first,
        with_secret("Bearer one"),
        "the same plugin and policy"
    );
    assert_ne!(
        first,
        with_secret("Bearer two"),
        "a session must not keep an instance sending the old secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dir_watcher_follows_the_lock_once_there_is_one() {
    use llm_worker::mcp::DirWatcher;
    use llm_worker::{LoadDirOptions, LockFile};
    let dir = llm_worker_tests::scratch_dir("dir-watcher-lock");
    for plugin in ["counter", "greet"] {
        std::fs::copy(
            llm_worker_tests::plugin_path(plugin),
            dir.join(format!("{plugin}.wasm")),
        )
        .expect("copy");
    }
    let host = llm_worker_tests::host().clone();
    let mut watcher =
        DirWatcher::load(host.clone(), dir.path(), LoadDirOptions::default()).expect("load");
    assert!(!watcher.options().locked, "no lock yet");
    let served = |watcher: &DirWatcher| -> Vec<String> {
        watcher
            .groups()
            .iter()
            .filter_map(|group| {
                std::path::Path::new(group.name())
                    .file_name()
                    .map(|name| name.to_string_lossy().into_owned())
            })
            .collect()
    };
    let lock_with = |plugins: &[&str]| {
        let loaded = host
            .load_dir_with(
                &dir,
                LoadDirOptions::default().ignore_lock(true),
                |_, _, _| {},
            )
            .expect("load");
        let approved: Vec<_> = loaded
            .plugins
            .into_iter()
            .filter(|plugin| plugins.contains(&plugin.name()))
            .collect();
        LockFile::of(&dir, &approved).write(&dir).expect("lock");
    };

    // Locked while serving: from now on the directory stays locked.
    lock_with(&["counter", "greet"]);
    watcher.rescan().await;
    assert!(watcher.options().locked, "locked since");
    assert_eq!(served(&watcher), ["counter.wasm", "greet.wasm"]);

    // The operator withdraws greet's approval; its file stays: it is no longer served.
    lock_with(&["counter"]);
    assert!(watcher.rescan().await);
    assert_eq!(served(&watcher), ["counter.wasm"]);

    // The lock is deleted and a plugin dropped in: the reload is refused (the watcher says
    // so), and nothing of it is served.
    std::fs::remove_file(dir.join(llm_worker::LOCK_FILE)).expect("delete the lock");
    std::fs::copy(llm_worker_tests::plugin_path("calc"), dir.join("calc.wasm")).expect("copy");
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed);
    assert!(
        said.iter()
            .any(|line| line.contains("still serving the plugins loaded before")),
        "{said:?}"
    );
    assert_eq!(served(&watcher), ["counter.wasm"]);
}
