//! Outbound HTTP through `wasi:http`: denied unless the policy grants the destination; a
//! granted name reaches public addresses only, unless the rule names the address or opts in.

use llm_worker::*;
use llm_worker_tests::http_server::TestServer;
use llm_worker_tests::wait::until;
use llm_worker_tests::{ScratchDir, host, plugin, plugin_path, scratch_dir};

/// A server on 127.0.0.1 answering every request with "hello from local".
fn test_server() -> TestServer {
    TestServer::answering("hello from local")
}

/// The fetcher plugin in its own directory, with `policy` beside it (if any).
fn fetcher_dir(name: &str, policy: Option<String>) -> ScratchDir {
    let dir = scratch_dir(name);
    std::fs::copy(plugin_path("fetcher"), dir.join("fetcher.wasm")).expect("copy");
    if let Some(policy) = policy {
        std::fs::write(dir.join("fetcher.policy.toml"), policy).expect("write policy");
    }
    dir
}

/// A session of the fetcher of `dir` (see [`fetcher_dir`]) and the counter.
fn session(dir: &ScratchDir) -> ToolServerHandle {
    let loaded = host()
        .load(dir.join("fetcher.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut worker = Worker::new();
    worker
        .register_tools(loaded.definitions())
        .expect("registers");
    worker
        .register_tools(plugin("counter").definitions())
        .expect("registers");
    worker.tool_server_handle()
}

async fn fetch(tools: &ToolServerHandle, url: &str) -> Result<String, ToolServerError> {
    tools
        .call_tool("fetch", &serde_json::json!({ "url": url }).to_string())
        .await
}

/// Whether `result` is the tool error that carries the `wasi:http` error code `code`.
fn failed_with(result: &Result<String, ToolServerError>, code: &str) -> bool {
    matches!(result, Err(ToolServerError::ToolExecution(message)) if message.contains(code))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_host_is_reachable() {
    let server = test_server();
    let policy = format!("[http]\nallow = [\"http://127.0.0.1:{}\"]\n", server.port());
    let dir = fetcher_dir("http-granted", Some(policy));
    let tools = session(&dir);
    let url = format!("http://127.0.0.1:{}/weather", server.port());
    assert_eq!(
        fetch(&tools, &url).await.as_deref(),
        Ok("200 hello from local")
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(tools.call_tool("count", "{}").await.as_deref(), Ok("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_not_granted_are_denied_before_any_connection() {
    let server = test_server();
    let other_port = server.port().wrapping_add(1).max(1);
    for policy in [
        Some(format!(
            "[http]\nallow = [\"http://127.0.0.1:{other_port}\"]\n"
        )),
        Some(format!(
            "[http]\nallow = [\"https://127.0.0.1:{}\"]\n",
            server.port()
        )),
        Some("[http]\nallow = [\"*.example.com\"]\n".to_owned()),
    ] {
        let dir = fetcher_dir("http-denied", policy.clone());
        let tools = session(&dir);
        let url = format!("http://127.0.0.1:{}/secret", server.port());
        let denied = fetch(&tools, &url).await;
        assert!(
            matches!(&denied, Err(ToolServerError::ToolExecution(m)) if m.contains("HttpRequestDenied")),
            "{policy:?}: {denied:?}"
        );
        assert_eq!(tools.call_tool("count", "{}").await.as_deref(), Ok("0"));
    }
    assert_eq!(server.connections(), 0, "nothing reached the server");
}

/// A plugin that sends requests and returns without waiting for them: the requests are capped
/// in flight, and cancelled when the call that sent them ends — they do not run on between
/// calls, holding connections and host memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_a_call_leaves_behind_are_capped_and_cancelled() {
    let server = TestServer::silent();
    // Waiting for a request still running would end at the time limit.
    let policy = format!(
        "[limits]\ntimeout_ms = 3000\n[http]\nallow = [\"http://127.0.0.1:{}\"]\n",
        server.port()
    );
    let dir = fetcher_dir("http-fire", Some(policy));
    let tools = session(&dir);
    let url = format!("http://127.0.0.1:{}/slow", server.port());
    let input = serde_json::json!({ "url": url, "count": 10 }).to_string();
    assert_eq!(
        tools.call_tool("fire", &input).await.as_deref(),
        Ok("sent 10")
    );
    let outcomes = tools
        .call_tool("outcomes", "{}")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let words: Vec<&str> = outcomes.split(' ').collect();
    assert_eq!(words.len(), 10, "{outcomes}");
    assert_eq!(
        words
            .iter()
            .filter(|w| **w == "ConnectionLimitReached")
            .count(),
        2,
        "8 in flight at most: {outcomes}"
    );
    // Ended by the end of the call that sent them, not by a deadline (ConnectionTimeout).
    assert_eq!(
        words.iter().filter(|w| **w == "InternalError").count(),
        8,
        "cancelled when the call ended: {outcomes}"
    );
    // The connections that were opened are closed by the host.
    until(
        "the host to close every connection its requests opened",
        || server.closed() == server.connections(),
    )
    .await;
    let accepted = server.connections();
    assert!(accepted <= 8, "{accepted} connections");
    assert_eq!(tools.call_tool("count", "{}").await.as_deref(), Ok("0"));
}

/// A rule that allows a name (or a pattern) reaches only public addresses: a name that
/// resolves to a loopback address is refused before any connection, whether it is
/// `localhost` (loopback by definition), a name under it, or a numeric name that only the
/// resolver reads as 127.0.0.1; so is an address matched by a wildcard rather than named.
/// The same address named literally is reached, and so are the names opted in with
/// `[http] allow_private`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_name_reaches_no_private_address_unless_named_or_opted_in() {
    let server = test_server();
    let port = server.port();
    for (rule, url) in [
        ("localhost", "localhost"),
        ("localhost", "LOCALHOST"),
        ("app.localhost", "app.localhost"),
        // inet_aton's forms of 127.0.0.1: names to us, addresses to the resolver.
        ("127.1", "127.1"),
        ("2130706433", "2130706433"),
        ("0x7f000001", "0x7f000001"),
        ("*.0.0.1", "127.0.0.1"),
    ] {
        let policy = format!("[http]\nallow = [\"http://{rule}:{port}\"]\n");
        let dir = fetcher_dir("http-by-name", Some(policy));
        let tools = session(&dir);
        let refused = fetch(&tools, &format!("http://{url}:{port}/")).await;
        assert!(
            failed_with(&refused, "DestinationIpProhibited"),
            "{rule}: {refused:?}"
        );
    }
    assert_eq!(server.connections(), 0, "refused before any connection");

    // Named literally: reached.
    let policy = format!("[http]\nallow = [\"http://127.0.0.1:{port}\"]\n");
    let dir = fetcher_dir("http-literal", Some(policy));
    let tools = session(&dir);
    let url = format!("http://127.0.0.1:{port}/");
    assert_eq!(
        fetch(&tools, &url).await.as_deref(),
        Ok("200 hello from local")
    );
    assert_eq!(server.requests().len(), 1);

    // Opted in: reached, by `localhost` and by a name the resolver answers, with or without
    // the rule in `allow` too; the opt-in covers its own rule only.
    let policy = format!(
        "[http]\nallow = [\"http://127.1:{port}\"]\n\
         allow_private = [\"http://localhost:{port}\", \"http://127.1:{port}\"]\n"
    );
    let dir = fetcher_dir("http-opt-in", Some(policy));
    let tools = session(&dir);
    for name in ["localhost", "127.1"] {
        let url = format!("http://{name}:{port}/");
        assert_eq!(
            fetch(&tools, &url).await.as_deref(),
            Ok("200 hello from local"),
            "{name}"
        );
    }
    assert_eq!(server.requests().len(), 3);
    let policy = format!(
        "[http]\nallow = [\"http://2130706433:{port}\"]\n\
         allow_private = [\"http://localhost:{port}\"]\n"
    );
    let dir = fetcher_dir("http-opt-in-own", Some(policy));
    let tools = session(&dir);
    let refused = fetch(&tools, &format!("http://2130706433:{port}/")).await;
    assert!(
        failed_with(&refused, "DestinationIpProhibited"),
        "{refused:?}"
    );
    assert_eq!(server.requests().len(), 3);
}

/// IPv6: `[::1]` named literally is reached; `localhost`, which also means ::1, is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_loopback_is_reached_only_when_named() {
    let Ok(server) = TestServer::answering_on("[::1]:0", "hello from local") else {
        eprintln!("no IPv6 loopback on this machine: skipped");
        return;
    };
    let port = server.port();
    let policy =
        format!("[http]\nallow = [\"http://[::1]:{port}\", \"http://localhost:{port}\"]\n");
    let dir = fetcher_dir("http-ipv6", Some(policy));
    let tools = session(&dir);
    let refused = fetch(&tools, &format!("http://localhost:{port}/")).await;
    assert!(
        failed_with(&refused, "DestinationIpProhibited"),
        "{refused:?}"
    );
    assert_eq!(server.connections(), 0);
    for url in [
        format!("http://[::1]:{port}/"),
        format!("http://[0:0::1]:{port}/"),
    ] {
        assert_eq!(
            fetch(&tools, &url).await.as_deref(),
            Ok("200 hello from local"),
            "{url}"
        );
    }
    assert_eq!(server.requests().len(), 2);
}

/// A secret goes only over https, or over http to a loopback address the rule names
/// literally: on any other rule that allows http, it is a load error naming the key and
/// the rule to write instead.
#[test]
fn a_secret_on_a_rule_that_allows_plain_http_to_a_name_is_a_load_error() {
    let secret = |rule: &str| {
        let policy = format!(
            "[http]\nallow = [\"{rule}\"]\n[[http.secrets]]\nhost = \"{rule}\"\n\
             header = \"Authorization\"\nvalue = \"Bearer token\"\n"
        );
        let dir = fetcher_dir("http-secret-rule", Some(policy));
        host().load(dir.join("fetcher.wasm"))
    };
    for (rule, instead) in [
        ("http://api.example.com", "https://api.example.com"),
        ("api.example.com:8443", "https://api.example.com:8443"),
        ("http://localhost:8080", "https://localhost:8080"),
        ("http://10.0.0.1", "https://10.0.0.1"),
    ] {
        let error = secret(rule).map(|_| ()).expect_err(rule).to_string();
        assert!(
            error.contains("http.secrets[0].host")
                && error.contains("plain http")
                && error.contains(instead),
            "{rule}: {error}"
        );
    }
    for rule in [
        "https://api.example.com",
        "http://127.0.0.1:8080",
        "127.0.0.1:8080",
        "http://[::1]:8080",
    ] {
        assert!(secret(rule).is_ok(), "{rule}");
    }
}

/// A policy built in code is not checked at load, but a secret still never goes over plain
/// http to a name: the request is sent without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_is_never_sent_over_plain_http_to_a_name() {
    let server = test_server();
    let grant = HttpGrant::parse(&format!("http://localhost:{}", server.port()))
        .expect("a rule")
        .with_private_addresses();
    let tools = with_secret(grant, "Bearer token");
    let url = format!("http://localhost:{}/", server.port());
    assert_eq!(
        fetch(&tools, &url).await.as_deref(),
        Ok("200 hello from local")
    );
    assert_eq!(server.header("authorization"), [None]);
}

/// A session of `plugin`'s tools.
fn tools_of(plugin: &LoadedPlugin) -> ToolServerHandle {
    let mut worker = Worker::new();
    worker
        .register_tools(plugin.definitions())
        .expect("registers");
    worker.tool_server_handle()
}

/// A session of the fetcher under a policy built in code: `grant`, with a secret
/// `Authorization` header `value` for it.
fn with_secret(grant: HttpGrant, value: &str) -> ToolServerHandle {
    let mut policy = SandboxPolicy::default();
    policy.http = vec![grant.clone()];
    policy.http_secrets = vec![HttpSecret::new(grant, "Authorization", value)];
    tools_of(
        &host()
            .load_with_policy(plugin_path("fetcher"), policy)
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

/// A secret that cannot be a header value (a control character, a letter beyond ASCII) was
/// skipped when the request left, and the plugin's own value of that header went in its place.
/// From a policy file it is refused at load; from a policy built in code, the request is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_that_cannot_be_a_header_never_lets_the_plugins_value_through() {
    let server = test_server();
    let rule = format!("http://127.0.0.1:{}", server.port());
    let dir = fetcher_dir(
        "http-secret-control",
        Some(format!(
            "[http]\nallow = [\"{rule}\"]\n[[http.secrets]]\nhost = \"{rule}\"\n\
             header = \"Authorization\"\nvalue = \"Bearer \\u0001x\"\n"
        )),
    );
    let refused = host()
        .load(dir.join("fetcher.wasm"))
        .expect_err("refused at load")
        .to_string();
    assert!(
        refused.contains("http.secrets[0].value") && refused.contains("no HTTP header value"),
        "{refused}"
    );
    let tools = with_secret(HttpGrant::parse(&rule).expect("a rule"), "Bearer \u{1}x");
    let input = serde_json::json!({
        "url": format!("{rule}/"),
        "authorization": "Bearer the-plugins-own",
    })
    .to_string();
    let denied = tools.call_tool("fetch", &input).await;
    assert!(failed_with(&denied, "HttpRequestDenied"), "{denied:?}");
    assert_eq!(server.connections(), 0, "denied before any connection");
}

/// A plugin's connections are the host's sockets: they counted only against the instance's 8
/// requests in flight, so many instances holding connections open could use the file
/// descriptors the host's listener needs. Each takes one of the host's budget of open files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_connections_count_against_the_hosts_open_files() {
    let server = test_server();
    let dir = fetcher_dir(
        "http-descriptors",
        Some(format!(
            "[http]\nallow = [\"http://127.0.0.1:{}\"]\n",
            server.port()
        )),
    );
    let url = format!("http://127.0.0.1:{}/", server.port());
    for (budget, expected) in [(0, None), (1, Some("200 hello from local"))] {
        let host = PluginHost::builder()
            .max_open_files(budget)
            .build()
            .expect("host");
        let tools = tools_of(
            &host
                .load(dir.join("fetcher.wasm"))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let fetched = fetch(&tools, &url).await;
        match expected {
            Some(answer) => {
                assert_eq!(fetched.as_deref(), Ok(answer), "budget {budget}");
                // The connection's descriptor is given back when it ends, which its I/O task
                // sees just after the call returns: then another fits. (Asked again until it
                // does, within 5 s: no event of the library tells when the socket is closed.)
                let mut again = fetch(&tools, &url).await;
                let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while failed_with(&again, "ConnectionLimitReached")
                    && std::time::Instant::now() < until
                {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    again = fetch(&tools, &url).await;
                }
                assert_eq!(again.as_deref(), Ok(answer));
            }
            None => assert!(
                failed_with(&fetched, "ConnectionLimitReached"),
                "budget {budget}: {fetched:?}"
            ),
        }
    }
    assert_eq!(
        server.connections(),
        2,
        "the first host connected to nothing, refused attempts connect nothing"
    );
}

/// `TRACE` is refused (it would echo the request back, headers the host added included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_method_is_refused() {
    let server = test_server();
    let policy = format!("[http]\nallow = [\"http://127.0.0.1:{}\"]\n", server.port());
    let dir = fetcher_dir("http-trace", Some(policy));
    let tools = session(&dir);
    let url = format!("http://127.0.0.1:{}/", server.port());
    let call = |method: &str| {
        let input = serde_json::json!({ "url": url, "method": method }).to_string();
        let tools = tools.clone();
        async move { tools.call_tool("fetch", &input).await }
    };
    for method in ["TRACE", "trace"] {
        let refused = call(method).await;
        assert!(
            failed_with(&refused, "HttpRequestDenied"),
            "{method}: {refused:?}"
        );
    }
    assert_eq!(server.connections(), 0, "refused before any connection");
    assert_eq!(call("GET").await.as_deref(), Ok("200 hello from local"));
    let methods: Vec<_> = server.requests().into_iter().map(|r| r.method).collect();
    assert_eq!(methods, [http::Method::GET]);
}

/// A request that would carry a host-held secret uses one of the usual methods (another may be
/// one a server echoes, as IIS's `TRACK` does, handing the secret to the plugin), and no URL
/// with user information is sent (it would reach the server's `Host` header, secret beside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_go_only_with_the_usual_methods_and_never_with_user_information() {
    let (with_secret, plain) = (test_server(), test_server());
    let policy = format!(
        "[http]\nallow = [\"http://127.0.0.1:{a}\", \"http://127.0.0.1:{b}\"]\n\
         [[http.secrets]]\nhost = \"http://127.0.0.1:{a}\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{CARGO_PKG_NAME}}\"\n",
        a = with_secret.port(),
        b = plain.port()
    );
    let dir = fetcher_dir("http-secret-methods", Some(policy));
    let tools = session(&dir);
    let call = |url: String, method: &str| {
        let input = serde_json::json!({ "url": url, "method": method }).to_string();
        let tools = tools.clone();
        async move { tools.call_tool("fetch", &input).await }
    };
    let secret_url = format!("http://127.0.0.1:{}/", with_secret.port());
    for method in ["TRACK", "PROPFIND", "get"] {
        let refused = call(secret_url.clone(), method).await;
        assert!(
            failed_with(&refused, "HttpRequestDenied"),
            "{method}: {refused:?}"
        );
    }
    for url in [
        format!("http://evil.example@127.0.0.1:{}/", with_secret.port()),
        format!("http://user:pass@127.0.0.1:{}/", plain.port()),
    ] {
        let refused = call(url.clone(), "GET").await;
        assert!(
            failed_with(&refused, "HttpRequestDenied"),
            "{url}: {refused:?}"
        );
    }
    assert_eq!(
        with_secret.connections(),
        0,
        "refused before any connection"
    );
    assert_eq!(plain.connections(), 0, "refused before any connection");
    // Without a secret, another method goes; with one, the usual methods do.
    let plain_url = format!("http://127.0.0.1:{}/", plain.port());
    assert!(call(plain_url, "PROPFIND").await.is_ok());
    assert!(call(secret_url, "GET").await.is_ok());
    let methods: Vec<_> = with_secret
        .requests()
        .into_iter()
        .map(|r| r.method)
        .collect();
    assert_eq!(methods, [http::Method::GET]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_fields_a_plugin_builds_are_bounded() {
    // Each `fields` resource a plugin builds lives in host memory the memory limit does not
    // see; wasmtime lets each hold 128 KiB, and a plugin may hold a thousand of them.
    let server = test_server();
    let policy = format!("[http]\nallow = [\"http://127.0.0.1:{}\"]\n", server.port());
    let dir = fetcher_dir("http-fields", Some(policy));
    let tools = session(&dir);
    let url = format!("http://127.0.0.1:{}/", server.port());
    let call = |authorization: String| {
        let tools = tools.clone();
        let url = url.clone();
        async move {
            tools
                .call_tool(
                    "fetch",
                    &serde_json::json!({ "url": url, "authorization": authorization }).to_string(),
                )
                .await
        }
    };
    let result = call("x".repeat(40 << 10)).await;
    assert!(
        matches!(&result, Err(ToolServerError::ToolExecution(message))
            if message.contains("total size of fields exceeds limit")),
        "{result:?}"
    );
    assert!(server.requests().is_empty(), "the request was sent");
    // A header of a few kilobytes (a large token) goes.
    assert_eq!(
        call("x".repeat(4 << 10)).await.as_deref(),
        Ok("200 hello from local")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_text_a_plugin_holds_is_bounded() {
    // An unsent request's authority and method live in host memory the memory limit does not
    // see, and `http` bounds neither: a plugin holding a thousand requests of 4 MiB each would
    // hold gigabytes.
    let server = test_server();
    let policy = format!("[http]\nallow = [\"http://127.0.0.1:{}\"]\n", server.port());
    let dir = fetcher_dir("http-hoard", Some(policy));
    let tools = session(&dir);
    let hoard = |count: u32, size: u32| {
        let tools = tools.clone();
        async move {
            tools
                .call_tool(
                    "hoard",
                    &serde_json::json!({ "count": count, "size": size }).to_string(),
                )
                .await
        }
    };
    // Refused (as text that does not parse is), not kept: 4 KiB of authority and method and
    // 9 KiB of path, which `http` takes.
    assert_eq!(hoard(3, 4 << 10).await.as_deref(), Ok("0 0 3"));
    assert_eq!(hoard(3, 9 << 10).await.as_deref(), Ok("0 0 0"));
    // What real requests carry is taken.
    assert_eq!(hoard(3, 60).await.as_deref(), Ok("3 3 3"));
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsent_request_bodies_are_bounded() {
    // What a plugin writes to a request's body stays in host memory until the request is sent
    // or dropped, even once the body is dropped unfinished: a thousand requests each holding
    // two 64 KiB writes held 128 MiB the memory limit does not see.
    let server = test_server();
    let policy = format!("[http]\nallow = [\"http://127.0.0.1:{}\"]\n", server.port());
    let dir = fetcher_dir("http-bodies", Some(policy));
    let tools = session(&dir);
    let call = |tool: &'static str, input: serde_json::Value| {
        let tools = tools.clone();
        async move { tools.call_tool(tool, &input.to_string()).await }
    };
    let stuffed = call("stuff", serde_json::json!({ "count": 20 }))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let counts: Vec<u64> = stuffed.split(' ').filter_map(|n| n.parse().ok()).collect();
    let [made, refused, bytes] = counts[..] else {
        panic!("not `made refused bytes`: {stuffed}")
    };
    assert_eq!((made, refused), (8, 12), "{stuffed}");
    // Each body took at most two writes of 64 KiB.
    assert!(bytes > 0 && bytes <= 8 * (128 << 10), "{stuffed}");
    // The requests stay held across calls (the instance is the session's): still no room.
    let again = call("stuff", serde_json::json!({ "count": 1 })).await;
    assert_eq!(again.as_deref(), Ok("0 1 0"));
    // Dropping them makes room again.
    let released = call("release", serde_json::json!({})).await;
    assert_eq!(released.as_deref(), Ok("8"));
    let after = call("stuff", serde_json::json!({ "count": 7 }))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(after.starts_with("7 0 "), "{after}");
    assert!(server.requests().is_empty(), "nothing was sent");
    // A request sent is not held: with seven unsent, two requests with bodies go one after
    // the other (the second has the place the first left).
    let url = format!("http://127.0.0.1:{}/", server.port());
    for _ in 0..2 {
        let fetched = call("fetch", serde_json::json!({ "url": url })).await;
        assert_eq!(fetched.as_deref(), Ok("200 hello from local"));
    }
    assert_eq!(server.requests().len(), 2);
    // Handles are reused once freed: in a new instance, seven requests sent one after another
    // and then eight kept are eight bodies, not one body counted under each handle it had.
    let fresh = session(&dir);
    for _ in 0..7 {
        let fetched = fresh
            .call_tool("fetch", &serde_json::json!({ "url": url }).to_string())
            .await;
        assert_eq!(fetched.as_deref(), Ok("200 hello from local"));
    }
    let kept = fresh
        .call_tool("stuff", &serde_json::json!({ "count": 8 }).to_string())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(kept.starts_with("8 0 "), "{kept}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_heads_are_bounded() {
    // A response's headers stay in host memory as long as the plugin keeps the response: hyper
    // takes heads of some 400 KiB and 100 headers. A head of 60 headers of 4 KiB is refused;
    // one of ordinary size passes.
    let huge = TestServer::answering_with_headers(60, 4 << 10);
    let fine = TestServer::answering_with_headers(20, 100);
    let policy = format!(
        "[http]\nallow = [\"http://127.0.0.1:{}\", \"http://127.0.0.1:{}\"]\n",
        huge.port(),
        fine.port()
    );
    let dir = fetcher_dir("http-heads", Some(policy));
    let tools = session(&dir);
    let fetch = |port: u16| {
        let tools = tools.clone();
        async move {
            tools
                .call_tool(
                    "fetch",
                    &serde_json::json!({ "url": format!("http://127.0.0.1:{port}/") }).to_string(),
                )
                .await
        }
    };
    let refused = fetch(huge.port()).await;
    assert!(
        matches!(&refused, Err(ToolServerError::ToolExecution(message))
            if message.contains("HttpResponseHeaderSectionSize")),
        "{refused:?}"
    );
    assert_eq!(huge.requests().len(), 1, "the request went out");
    assert_eq!(fetch(fine.port()).await.as_deref(), Ok("200 "));
}

/// A plugin denied in a loop wrote the host's log as fast as it could: a line per request,
/// each quoting up to 9 KiB of the plugin's URL. The first few of a call are logged, then one
/// line says more were not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_denied_in_a_loop_are_logged_a_few_times_a_call() {
    // Contract 0.3.0's fetcher: its calls run in the caller's task, whose log is captured.
    let dir = scratch_dir("http-denied-loop");
    std::fs::copy(
        llm_worker_tests::plugin_v03_path("fetcher"),
        dir.join("fetcher.wasm"),
    )
    .expect("copy");
    std::fs::write(
        dir.join("fetcher.policy.toml"),
        "[http]\nallow = [\"https://api.example.com\"]\n",
    )
    .expect("write policy");
    let tools = session(&dir);
    let url = format!("http://not-granted.example/{}", "x".repeat(8000));
    let input = serde_json::json!({ "url": url, "count": 50 }).to_string();
    let (sent, said) = llm_worker_tests::logs::logged(tools.call_tool("fire", &input)).await;
    assert_eq!(sent.as_deref(), Ok("sent 50"));
    let denied = said
        .iter()
        .filter(|line| line.contains("denied an HTTP request"))
        .count();
    assert_eq!(denied, 8, "{said:?}");
    assert_eq!(
        said.iter()
            .filter(|line| line.contains("denied more HTTP requests in this call"))
            .count(),
        1,
        "{said:?}"
    );
    // The next call logs its own first few again.
    let (_, said) = llm_worker_tests::logs::logged(tools.call_tool("fire", &input)).await;
    assert_eq!(
        said.iter()
            .filter(|line| line.contains("denied an HTTP request"))
            .count(),
        8,
        "{said:?}"
    );
}
