//! `mcp-server-fetch` beside our `fetch` plugin, both pointed at a web server the test runs
//! on 127.0.0.1: the same listing, pages, paging, robots.txt refusals and errors, and the
//! escapes the sandbox contains (a redirect off the grant, an ungranted or private host, a
//! response over the output limit, a slow drip).
//!
//! The original refuses loopback addresses unless started with `--allow-private-ips`, so it is
//! started so, except where its own refusal is what is recorded. Our policy grants exactly the
//! server's `http://127.0.0.1:PORT` (a loopback address named literally, which the host then
//! lets through: see docs/policy.md).
//!
//! Normalisations, each named where it is applied:
//! - **error framing**: the original says `Error executing tool fetch: …`, our host
//!   `Execution failed: …`: the message after it must be equal.
//! - **article words**: HTML becomes Markdown by different means (readabilipy and
//!   markdownify there, htmd with non-content elements left out here), so a simplified page is
//!   compared as its sequence of words (runs of letters and digits) from its first heading on
//!   (the original puts the page's `<title>` before it) and without Markdown link targets (the
//!   original drops links, keeping their text), which must be equal; raw pages and every note
//!   are compared exactly.
//!
//! The original is run without Node on its `PATH` (see
//! `llm_worker_tests::reference::fetch_original`); the test site is
//! `llm_worker_tests::reference::site`.

use std::collections::BTreeSet;

use llm_worker_tests::reference::site::{Site, long_text};
use llm_worker_tests::reference::{FETCH, fetch_original, fetch_policy};
use serde_json::json;

use super::{Session, call_text, ours, plugin_dir, program, shapes};

/// Our plugin, its policy granting exactly `grants` (and the prompt the same), and `more`
/// (TOML tables: `[limits]`, `[env]`).
async fn our_fetch(grants: &[String], more: &str) -> (Session, llm_worker_tests::ScratchDir) {
    let policy = fetch_policy(grants, more);
    let (dir, scratch) = plugin_dir("fetch", &[("fetch.policy.toml", &policy)]);
    (ours(&dir).await, scratch)
}

/// The original, with `--allow-private-ips` if `private`.
async fn their_fetch(private: bool) -> Option<(Session, llm_worker_tests::ScratchDir)> {
    let program = program(FETCH)?;
    Some(fetch_original(&program, private).await)
}

/// The answer's text, and whether it is an error.
async fn fetch(session: &Session, arguments: serde_json::Value) -> (String, bool) {
    call_text(session, "fetch", arguments)
        .await
        .unwrap_or_else(|e| panic!("fetch: {e}"))
}

/// An error's message without its framing (the **error framing** normalisation).
fn message((text, is_error): &(String, bool)) -> String {
    assert!(is_error, "not an error: {text}");
    text.strip_prefix("Error executing tool fetch: ")
        .or_else(|| text.strip_prefix("Execution failed: "))
        .unwrap_or_else(|| panic!("an error without a known framing: {text}"))
        .to_owned()
}

/// The **article words** normalisation: the runs of letters and digits, in order, from the
/// first Markdown heading on (all of them if there is none), link targets left out.
fn words(text: &str) -> Vec<String> {
    let article = text.find("\n# ").map_or(text, |at| &text[at..]);
    let mut shown = String::new();
    let mut rest = article;
    while let Some(at) = rest.find("](") {
        shown.push_str(&rest[..at]);
        rest = rest[at..].find(')').map_or("", |end| &rest[at + end + 1..]);
    }
    shown.push_str(rest);
    shown
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_and_the_prompt_are_listed_alike() {
    let Some((theirs, _their_dir)) = their_fetch(true).await else {
        return;
    };
    // A placeholder grant: a plugin that imports wasi:http with none is refused at load.
    let (ours, _dir) = our_fetch(&["https://example.com".to_owned()], "").await;
    assert_eq!(shapes(&ours).await, shapes(&theirs).await);
    let their_tools = theirs.list_all_tools().await.expect("tools/list");
    let our_tools = ours.list_all_tools().await.expect("tools/list");
    let (their, our) = (&their_tools[0], &our_tools[0]);
    assert_eq!(our.description, their.description);
    for (name, property) in their.input_schema["properties"]
        .as_object()
        .expect("properties")
    {
        let mine = &our.input_schema["properties"][name];
        for key in ["description", "default", "minimum", "maximum", "type"] {
            assert_eq!(mine.get(key), property.get(key), "{name}.{key}");
        }
    }
    let hints = |tool: &rmcp::model::Tool| {
        let hints = tool.annotations.clone().expect("hints");
        (
            hints.open_world_hint,
            hints.idempotent_hint,
            hints.destructive_hint,
        )
    };
    assert_eq!(hints(our), hints(their));

    let their_prompts = theirs.list_all_prompts().await.expect("prompts/list");
    let our_prompts = ours.list_all_prompts().await.expect("prompts/list");
    let prompt_shape = |prompt: &rmcp::model::Prompt| {
        let arguments: BTreeSet<(String, Option<String>, Option<bool>)> = prompt
            .arguments
            .iter()
            .flatten()
            .map(|a| (a.name.clone(), a.description.clone(), a.required))
            .collect();
        (prompt.name.clone(), prompt.description.clone(), arguments)
    };
    assert_eq!(
        our_prompts.iter().map(prompt_shape).collect::<Vec<_>>(),
        their_prompts.iter().map(prompt_shape).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_raw_text_paging_and_redirects_are_alike() {
    let site = Site::start(None).await;
    let Some((theirs, _their_dir)) = their_fetch(true).await else {
        return;
    };
    let (ours, _dir) = our_fetch(&[site.url("")], "").await;

    // A page, simplified: the same words.
    let url = site.url("/page");
    let their = fetch(&theirs, json!({ "url": url })).await;
    let our = fetch(&ours, json!({ "url": url })).await;
    println!("page: theirs {their:?}\n      ours {our:?}");
    assert!(!their.1 && !our.1);
    let head = format!("Contents of {url}:\n");
    assert!(our.0.starts_with(&head) && their.0.starts_with(&head));
    assert_eq!(words(&our.0), words(&their.0));

    // Redirected: the same page, under the URL asked for.
    let redirect = site.url("/redirect");
    let their = fetch(&theirs, json!({ "url": redirect })).await;
    let our = fetch(&ours, json!({ "url": redirect })).await;
    assert!(our.0.starts_with(&format!("Contents of {redirect}:\n")));
    assert_eq!(words(&our.0), words(&their.0));

    // Raw HTML and plain text: exactly the same, notes included.
    let raw = json!({ "url": url, "raw": true, "max_length": 200 });
    assert_eq!(fetch(&ours, raw.clone()).await, fetch(&theirs, raw).await);
    let long = site.url("/long");
    let total = long_text().chars().count();
    let mut start = 0;
    while start <= total {
        let arguments = json!({ "url": long, "start_index": start, "max_length": 3000 });
        let our = fetch(&ours, arguments.clone()).await;
        assert_eq!(our, fetch(&theirs, arguments).await, "start_index {start}");
        start += 3000;
    }
    assert!(our_text_ends_the_page(
        &fetch(&ours, json!({ "url": long, "start_index": total })).await
    ));
    // The server saw each of them fetch robots.txt before the page.
    let paths = site.paths();
    assert!(
        paths.iter().filter(|p| *p == "/robots.txt").count() >= 2,
        "{paths:?}"
    );
}

fn our_text_ends_the_page((text, is_error): &(String, bool)) -> bool {
    !is_error && text.ends_with(":\n<error>No more content available.</error>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_txt_refusals_and_errors_say_the_same() {
    let site = Site::start(None).await;
    // A port nothing listens on: bound, then closed.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let Some((theirs, _their_dir)) = their_fetch(true).await else {
        return;
    };
    let unreachable = format!("http://127.0.0.1:{dead}");
    let (ours, _dir) = our_fetch(&[site.url(""), unreachable.clone()], "").await;
    for url in [
        site.url("/private/page"),
        site.url("/missing"),
        format!("{unreachable}/page"),
    ] {
        let their = fetch(&theirs, json!({ "url": url })).await;
        let our = fetch(&ours, json!({ "url": url })).await;
        println!("{url}: theirs {their:?}\n      ours {our:?}");
        assert_eq!(message(&our), message(&their), "{url}");
    }

    // The prompt: a user's own request, robots.txt not asked; a failure is its text.
    for url in [site.url("/private/page"), site.url("/missing")] {
        let mut texts = Vec::new();
        for session in [&theirs, &ours] {
            let mut get = rmcp::model::GetPromptRequestParams::new("fetch");
            get.arguments = json!({ "url": url }).as_object().cloned();
            let prompt = session.get_prompt(get).await.expect("prompts/get");
            let messages = serde_json::to_value(&prompt.messages).expect("JSON");
            let text: String = messages
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["content"]["text"].as_str())
                .collect();
            texts.push(text);
        }
        println!(
            "prompt {url}: theirs {:?}\n      ours {:?}",
            texts[0], texts[1]
        );
        assert_eq!(words(&texts[1]), words(&texts[0]), "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_off_the_grant_are_never_reached() {
    // Never granted: only reached by a redirect, or asked for directly.
    let elsewhere = Site::start(None).await;
    let site = Site::start(Some(elsewhere.port)).await;
    // Granted by name, `localhost`, which resolves to a loopback address.
    let named = Site::start(None).await;
    let Some((theirs, _their_dir)) = their_fetch(true).await else {
        return;
    };
    let Some((their_strict, _strict_dir)) = their_fetch(false).await else {
        return;
    };
    let by_name = format!("http://localhost:{}", named.port);
    let (ours, _dir) = our_fetch(&[site.url(""), by_name.clone()], "").await;

    // A redirect to a host the policy does not grant.
    let away = site.url("/away");
    let hop = elsewhere.url("/page");
    let our = fetch(&ours, json!({ "url": away })).await;
    println!("redirect away: ours {our:?}");
    assert!(
        message(&our).starts_with(&format!(
            "Refused to fetch {hop}: http://127.0.0.1:{} is not among the hosts this plugin may \
             reach",
            elsewhere.port
        )),
        "{our:?}"
    );
    assert_eq!(elsewhere.connections(), 0, "ours reached the other host");
    let their = fetch(&theirs, json!({ "url": away })).await;
    println!(
        "redirect away: theirs {their:?}; the other host saw {:?}",
        elsewhere.paths()
    );
    // The original follows it (it has no list of hosts): robots.txt, then the page.
    assert!(!their.1, "{their:?}");
    assert_eq!(elsewhere.paths(), ["/robots.txt", "/page"]);

    // The host not listed, asked for directly.
    let seen = elsewhere.connections();
    let our = fetch(&ours, json!({ "url": hop })).await;
    assert!(
        message(&our).starts_with(&format!("Refused to fetch {hop}: ")),
        "{our:?}"
    );
    assert_eq!(elsewhere.connections(), seen, "ours reached the other host");
    let their = fetch(&their_strict, json!({ "url": hop })).await;
    println!("not listed: ours {our:?}\n  theirs (private addresses refused) {their:?}");
    assert!(message(&their).starts_with("Refused to fetch"), "{their:?}");
    assert_eq!(
        elsewhere.connections(),
        seen,
        "the original reached the other host"
    );

    // A granted name that resolves to a private address.
    let url = format!("{by_name}/page");
    let our = fetch(&ours, json!({ "url": url })).await;
    let their = fetch(&their_strict, json!({ "url": url })).await;
    println!("private by name: ours {our:?}\n  theirs {their:?}");
    assert!(
        message(&our).contains("resolves to an address that is not public"),
        "{our:?}"
    );
    assert!(
        message(&their).contains("which is not a public address"),
        "{their:?}"
    );
    assert_eq!(named.connections(), 0, "a private address was reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_and_slow_responses_are_bounded() {
    let site = Site::start(None).await;
    let Some((theirs, _their_dir)) = their_fetch(true).await else {
        return;
    };
    let grant = [site.url("")];
    let (ours, _dir) = our_fetch(&grant, "").await;
    let big = site.url("/big");

    // The largest page asked for fits the host's default output limit, alike.
    let largest = json!({ "url": big, "raw": true, "max_length": 999_999 });
    let our = fetch(&ours, largest.clone()).await;
    assert!(!our.1 && our.0.len() < 1 << 20, "{}", our.0.len());
    assert!(
        our.0
            .ends_with("a start_index of 999999 to get more content.</error>")
    );
    assert_eq!(our, fetch(&theirs, largest.clone()).await);
    // Past what ours reads of a body (2 MiB): its note says the rest was not read.
    let past = json!({ "url": big, "raw": true, "start_index": (2 << 20) - 10 });
    let our = fetch(&ours, past.clone()).await;
    let their = fetch(&theirs, past).await;
    println!(
        "past 2 MiB: ours {:?}; theirs {} characters",
        our.0,
        their.0.len()
    );
    assert!(our.0.contains("only its start was read"), "{our:?}");

    // Under a smaller output limit, the host refuses the answer, saying so.
    let (small, _small_dir) = our_fetch(&grant, "[limits]\nmax_output_bytes = 100000").await;
    let our = fetch(&small, largest).await;
    println!("over the output limit: ours {our:?}");
    assert!(
        message(&our).contains("over the output limit of 100000 bytes"),
        "{our:?}"
    );

    // A slow drip ends when the plugin stops waiting (FETCH_TIMEOUT_MS), before the host's
    // time limit: a tool error, the instance kept.
    let drip = json!({ "url": site.url("/drip") });
    let (patient, _patient_dir) = our_fetch(
        &grant,
        "[env]\nset = { FETCH_TIMEOUT_MS = \"1000\" }\n[limits]\ntimeout_ms = 8000",
    )
    .await;
    let our = fetch(&patient, drip.clone()).await;
    println!("slow drip, FETCH_TIMEOUT_MS 1000: ours {our:?}");
    assert!(
        message(&our).contains("no complete response within 1000 ms"),
        "{our:?}"
    );
    // With the host's time limit first, the call ends there, saying so (the host's message, or
    // the plugin's if it reads the host's timeout of the request first).
    let (slow, _slow_dir) = our_fetch(&grant, "[limits]\ntimeout_ms = 2000").await;
    let our = fetch(&slow, drip).await;
    println!("slow drip, timeout_ms 2000: ours {our:?}");
    assert!(our.1 && our.0.contains("time limit"), "{our:?}");
    // The original waits for it (its timeout is per read); a drip of 30 bytes over 3 s.
    let their = fetch(&theirs, json!({ "url": site.url("/drip30") })).await;
    println!("slow drip of 3 s: theirs {their:?}");
    assert!(their.0.ends_with(&"x".repeat(30)), "{their:?}");
}
