//! Request bodies: weighed for what their JSON takes once parsed, and the memory requests in
//! progress hold bounded per client and in all.

use std::sync::Arc;

use async_trait::async_trait;
use llm_worker::mcp::{BearerToken, HttpOptions, McpOptions, ToolCatalog, ToolGroup};
use llm_worker::{TaskSupport, Tool, ToolDefinition, ToolError, ToolMeta};
use serde_json::json;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef01";

/// A tool that says it started, then answers once the test releases it (as a task, for a
/// client that takes tasks, when its input says `"task"`).
struct Waits {
    started: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Tool for Waits {
    async fn execute(&self, input_json: &str) -> Result<String, ToolError> {
        if input_json.contains("\"now\"") {
            return Ok("now".into());
        }
        if input_json.contains("\"task\"") {
            llm_worker::task::start();
        }
        // Waiting for the release before saying it started: a release right after is not missed.
        let released = self.release.notified();
        self.started.notify_one();
        released.await;
        if input_json.contains("\"big\"") {
            return Ok(format!("released {}", "x".repeat(50_000)));
        }
        Ok("released".into())
    }
}

/// Serves `waits` (and nothing else) to alice and bob with `http`'s limits: the URL, and the
/// notices of a call starting and the release of one.
async fn serve(http: HttpOptions) -> (String, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
    let started = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let (tool_started, tool_release) = (Arc::clone(&started), Arc::clone(&release));
    let group = ToolGroup::new("waits", 1, move || {
        let (started, release) = (Arc::clone(&tool_started), Arc::clone(&tool_release));
        let definition: ToolDefinition = Arc::new(move || {
            (
                ToolMeta::new("waits")
                    .description("Waits for the test")
                    .input_schema(json!({"type": "object"}))
                    .task_support(TaskSupport::Optional),
                Arc::new(Waits {
                    started: Arc::clone(&started),
                    release: Arc::clone(&release),
                }) as Arc<dyn Tool>,
            )
        });
        vec![definition]
    });
    let url = crate::serve_with(
        ToolCatalog::new([group]),
        McpOptions::new("bodies", "1"),
        http.named_tokens([
            BearerToken::new("alice", ALICE),
            BearerToken::new("bob", BOB),
        ]),
    )
    .await;
    (url, started, release)
}

/// POSTs `message` to `url` with `token` (in `session`, if given): the status, the headers and
/// the body's text.
async fn post(
    url: &str,
    token: &str,
    session: Option<&str>,
    message: &serde_json::Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(message.to_string());
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let answer = request.send().await.expect("an answer");
    let status = answer.status().as_u16();
    let headers = answer.headers().clone();
    (status, headers, answer.text().await.expect("a body"))
}

/// Opens a session of `token`'s: its id.
async fn open(url: &str, token: &str) -> String {
    open_with(url, token, json!({})).await
}

/// Opens a session of `token`'s whose client declares `capabilities`: its id.
async fn open_with(url: &str, token: &str, capabilities: serde_json::Value) -> String {
    let (status, headers, text) = post(
        url,
        token,
        None,
        &json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": capabilities,
                       "clientInfo": {"name": "test", "version": "1"}},
        }),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let session = headers
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .expect("text")
        .to_owned();
    let (status, _, text) = post(
        url,
        token,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202, "{text}");
    session
}

/// A call of `waits` whose arguments carry `numbers` small numbers (each two bytes of JSON,
/// some 64 bytes once parsed, as the server estimates it).
fn call(id: u64, numbers: usize) -> serde_json::Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "waits", "arguments": {"numbers": vec![1; numbers]}},
    })
}

/// A call of `waits` that answers at once, with `numbers` small numbers.
fn call_now(id: u64, numbers: usize) -> serde_json::Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "waits", "arguments": {"numbers": vec![1; numbers], "now": true}},
    })
}

/// A heavy call of `token` in `session` that answers at once, sent until it is not refused for
/// the memory its client's requests hold (rmcp lets go of a finished request just after its
/// answer): its status and text.
async fn admitted(url: &str, token: &str, session: &str) -> (u16, String) {
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            let (status, _, text) = post(url, token, Some(session), &call_now(9, 1_500)).await;
            if status != 503 {
                return (status, text);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the memory held was given back")
}

/// The attack: a body within the byte limit made of tiny objects (`{"":0}`, seven bytes, a
/// B-tree node of some 600 bytes once parsed), in a `_meta` that a standing request keeps for
/// its life: a hundred times its size in the server's memory, per request. It is refused
/// before rmcp parses it; the same client goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_many_small_values_is_refused_before_it_is_parsed() {
    let (url, _, _) = serve(HttpOptions::default().max_body_bytes(64 << 10)).await;
    let pad = vec![json!({"": 0}); 9_000];
    let message = json!({
        "jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"pad": pad}},
    });
    assert!(message.to_string().len() < 64 << 10);
    let (status, headers, text) = post(&url, ALICE, None, &message).await;
    assert_eq!(status, 413, "{text}");
    assert!(
        text.contains("once parsed") && text.contains("send fewer, larger ones"),
        "{text}"
    );
    assert!(headers.get("mcp-session-id").is_none());
    // As long a body of one long string passes: its weight is its length.
    let message = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"},
                   "_meta": {"pad": "x".repeat(60_000)}},
    });
    let (status, _, text) = post(&url, ALICE, None, &message).await;
    assert_eq!(status, 200, "{text}");
    // And over the byte limit is refused as before.
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"pad": "x".repeat(70_000)}}});
    let (status, _, text) = post(&url, ALICE, None, &message).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("larger than this server's limit"), "{text}");
}

/// [`serve`] with 16 KiB bodies and 512 KiB for requests (128 KiB for each client).
async fn small_server() -> (String, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
    serve(
        HttpOptions::default()
            .max_body_bytes(16 << 10)
            .max_request_memory(512 << 10),
    )
    .await
}

/// Opens a session of `token`'s whose client takes tasks: its id.
async fn open_taking_tasks(url: &str, token: &str) -> String {
    open_with(
        url,
        token,
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
    )
    .await
}

/// A server with 512 KiB for requests (128 KiB for each client; a call of 1,500 small numbers
/// is weighed about 100 KiB), and Alice's session with such a call of the waiting tool in
/// progress: its server, its session, the call, and the notices of calls started and released.
struct Held {
    url: String,
    alice: String,
    call: tokio::task::JoinHandle<(u16, reqwest::header::HeaderMap, String)>,
    started: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

async fn alice_holding_a_call() -> Held {
    let (url, started, release) = small_server().await;
    let alice = open(&url, ALICE).await;
    let call = {
        let (url, alice) = (url.clone(), alice.clone());
        tokio::spawn(async move { post(&url, ALICE, Some(&alice), &call(2, 1_500)).await })
    };
    started.notified().await;
    Held {
        url,
        alice,
        call,
        started,
        release,
    }
}

/// The attack: one client keeps requests in progress (calls that wait, standing streams),
/// each holding its parsed body, until the server's memory is gone for everyone. A client may
/// hold a quarter of the memory for requests; past it, its next request is 503 with
/// `Retry-After`, while another client's passes, and the first's passes again once its held
/// request ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_hold_the_memory_of_requests_for_all() {
    let Held {
        url,
        alice,
        call: held,
        started,
        release,
    } = alice_holding_a_call().await;
    let (status, headers, text) = post(&url, ALICE, Some(&alice), &call(3, 1_500)).await;
    assert_eq!(status, 503, "{text}");
    assert_eq!(
        headers.get("retry-after").map(|value| value.as_bytes()),
        Some(&b"1"[..])
    );
    assert!(
        text.contains("this client's requests in progress hold"),
        "{text}"
    );
    // Another client is not held back: its call starts too. Both are released.
    let bob = open(&url, BOB).await;
    let bobs = {
        let url = url.clone();
        tokio::spawn(async move { post(&url, BOB, Some(&bob), &call(2, 1_500)).await })
    };
    started.notified().await;
    release.notify_waiters();
    let (status, _, text) = bobs.await.expect("bob's call");
    assert!(
        status == 200 && text.contains("released"),
        "{status} {text}"
    );
    // Alice's held call ended: what it held is hers again.
    let (status, _, text) = held.await.expect("alice's call");
    assert!(
        status == 200 && text.contains("released"),
        "{status} {text}"
    );
    let (status, text) = admitted(&url, ALICE, &alice).await;
    assert!(status == 200 && text.contains("now"), "{status} {text}");
}

/// The attack: a client starts tasks whose arguments are heavy once parsed (a task keeps its
/// call, arguments and all, for its hooks, until it ends); each request's share of the memory
/// was given back once the client was handed the task, so tasks held any amount. A task keeps
/// its request's share until it ends; the client can still cancel it (a small request may use
/// a reserve past its client's part), which gives the share back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_holds_its_requests_share_until_it_ends() {
    let (url, started, _release) = small_server().await;
    let alice = open_taking_tasks(&url, ALICE).await;
    let task = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "waits", "arguments": {"numbers": vec![1; 1_500], "task": true}},
    });
    let (status, _, text) = post(&url, ALICE, Some(&alice), &task).await;
    assert!(status == 200 && text.contains("taskId"), "{status} {text}");
    let id = message_of(&text)["result"]["taskId"].clone();
    started.notified().await;
    // The task was handed to the client, its answer has ended; its arguments are still held.
    let (status, _, text) = post(&url, ALICE, Some(&alice), &call_now(3, 1_500)).await;
    assert_eq!(status, 503, "the task holds its request's share: {text}");
    // The client cancels it: its share is given back.
    let cancel =
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/cancel", "params": {"taskId": id}});
    let (status, _, text) = post(&url, ALICE, Some(&alice), &cancel).await;
    assert!(
        status == 200 && message_of(&text)["error"].is_null(),
        "{status} {text}"
    );
    let (status, text) = admitted(&url, ALICE, &alice).await;
    assert!(status == 200 && text.contains("now"), "{status} {text}");
}

/// The JSON-RPC message in an answer's text (a stream's `data:` line, or the body itself).
fn message_of(text: &str) -> serde_json::Value {
    let json = text
        .lines()
        .find_map(|line| {
            line.strip_prefix("data: ")
                .filter(|data| data.starts_with('{'))
        })
        .unwrap_or(text);
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The attack: a task ends with a large result; the client polls `tasks/get` for it on many
/// connections at once. Each poll is a few bytes and runs no plugin code, but its answer copies
/// the result: as many copies as polls in flight. A poll is charged the result's weight against
/// its client's part before it is answered: past the part it is refused, saying why, and
/// served again once the client's requests hold less; another client is not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_a_large_result_cannot_hold_copies_without_end() {
    let (url, started, release) = small_server().await;
    let alice = open_taking_tasks(&url, ALICE).await;
    let task = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "waits", "arguments": {"task": true, "big": true}},
    });
    let (status, _, text) = post(&url, ALICE, Some(&alice), &task).await;
    assert_eq!(status, 200, "{text}");
    let id = message_of(&text)["result"]["taskId"].clone();
    started.notified().await;
    release.notify_one();
    let poll = |n: u64| json!({"jsonrpc": "2.0", "id": 10 + n, "method": "tasks/get", "params": {"taskId": id}});
    // Polled until it has completed: one poll at a time, each answer's copy (some 50 KiB) is
    // given back before the next.
    let completed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        for n in 0.. {
            let (_, _, text) = post(&url, ALICE, Some(&alice), &poll(n)).await;
            let message = message_of(&text);
            if message["result"]["status"] == "completed" {
                return message;
            }
            assert!(message["error"].is_null(), "{message}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        unreachable!()
    })
    .await
    .expect("the task completed");
    assert!(completed.to_string().contains("xxxxxxxx"), "{completed}");
    // A call of Alice's in progress holds 100 KiB of her 128: a poll that would copy 50 KiB
    // more (as another poll in flight would) is refused.
    let held = {
        let (url, alice) = (url.clone(), alice.clone());
        tokio::spawn(async move { post(&url, ALICE, Some(&alice), &call(3, 1_500)).await })
    };
    started.notified().await;
    let (status, _, text) = post(&url, ALICE, Some(&alice), &poll(100)).await;
    assert_eq!(status, 200, "{text}");
    let refused = message_of(&text)["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("refused: {text}"))
        .to_owned();
    assert!(
        refused.contains("cannot be sent now") && refused.contains("128 KiB"),
        "{refused}"
    );
    // Another client's calls pass meanwhile.
    let bob = open(&url, BOB).await;
    let (status, _, text) = post(&url, BOB, Some(&bob), &call_now(4, 10)).await;
    assert!(status == 200 && text.contains("now"), "{status} {text}");
    // Alice's call ends: the result is sent again.
    release.notify_one();
    let (status, _, text) = held.await.expect("alice's call");
    assert!(
        status == 200 && text.contains("released"),
        "{status} {text}"
    );
    let served = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        for n in 200.. {
            let (_, _, text) = post(&url, ALICE, Some(&alice), &poll(n)).await;
            if message_of(&text)["result"]["status"] == "completed" {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(served.is_ok(), "the result was not sent again");
}

/// The attack: a client sends a second request with the id of one in progress. rmcp routes
/// answers by id: the first answer went to the second request's stream, and the second answer,
/// with no stream left, to the session's general stream, kept there for the session's life and
/// counted nowhere (a large result, many times). The second request is refused (409, with its
/// id); the first gets its own answer. An id is free again once its answer has gone out, or
/// once the client has cancelled its request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_in_progress_cannot_be_used_again() {
    let Held {
        url,
        alice,
        call: first,
        started,
        release,
    } = alice_holding_a_call().await;
    let (status, _, text) = post(&url, ALICE, Some(&alice), &call_now(2, 10)).await;
    assert!(
        status == 409
            && message_of(&text)["id"] == 2
            && text.contains("request of id 2 is in progress"),
        "{status} {text}"
    );
    // The id `"2"` is another (JSON-RPC tells them apart); another client learns nothing of
    // the session's ids (no such session, before any id is looked at).
    let mut string_id = call_now(0, 10);
    string_id["id"] = json!("2");
    let (status, _, text) = post(&url, ALICE, Some(&alice), &string_id).await;
    assert!(status == 200 && text.contains("now"), "{status} {text}");
    let (status, _, text) = post(&url, BOB, Some(&alice), &call_now(2, 10)).await;
    assert_eq!(status, 404, "{text}");
    // A request the client cancels frees its id.
    let cancelled = {
        let (url, alice) = (url.clone(), alice.clone());
        tokio::spawn(async move { post(&url, ALICE, Some(&alice), &call(7, 10)).await })
    };
    started.notified().await;
    let cancel = json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7},
    });
    let (status, _, text) = post(&url, ALICE, Some(&alice), &cancel).await;
    assert_eq!(status, 202, "{text}");
    let (status, _, text) = post(&url, ALICE, Some(&alice), &call_now(7, 10)).await;
    assert!(status == 200 && text.contains("now"), "{status} {text}");
    cancelled.abort();
    release.notify_one();
    let (status, _, text) = first.await.expect("the first call");
    let answer = message_of(&text);
    assert!(
        status == 200 && answer["id"] == 2 && text.contains("released"),
        "{status} {text}"
    );
    // Its id is free again once answered; a new id was always free.
    let (status, _, text) = post(&url, ALICE, Some(&alice), &call_now(5, 10)).await;
    assert!(status == 200 && text.contains("now"), "{status} {text}");
}

/// The attack: a client sends a heavy call of a tool that waits, and closes its connection at
/// once: rmcp goes on with the call (for the client to resume its answer), holding the parsed
/// request, while the answer's body that held its share is gone. The share stays with the
/// request until its handler ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_left_holds_its_share_until_it_ends() {
    let Held {
        url,
        alice,
        call: left,
        release,
        ..
    } = alice_holding_a_call().await;
    left.abort();
    let _ = left.await;
    let (status, _, text) = post(&url, ALICE, Some(&alice), &call_now(3, 1_500)).await;
    assert_eq!(status, 503, "the call goes on, holding its request: {text}");
    // The call ends: its share is given back once rmcp lets go of the request.
    release.notify_one();
    let (status, text) = admitted(&url, ALICE, &alice).await;
    assert!(status == 200 && text.contains("now"), "{status} {text}");
}

/// An `initialize` whose capabilities and `_meta` would take more than 256 KiB once parsed
/// (rmcp keeps them for the session's life) is refused, though far within the body limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_initialize_is_refused() {
    let (url, _, _) = serve(HttpOptions::default()).await;
    let experimental: serde_json::Map<String, serde_json::Value> = (0..1_500)
        .map(|n| (format!("x{n}"), json!({"": 0})))
        .collect();
    let message = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": experimental},
                   "clientInfo": {"name": "test", "version": "1"}},
    });
    assert!(message.to_string().len() < 64 << 10);
    let (status, _, text) = post(&url, ALICE, None, &message).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("kept for the session's life"), "{text}");
}

/// A liveness probe (a load balancer's, Kubernetes') gets `200 ok` without a token and by any
/// name; it tells nothing else, and the MCP endpoint still asks for a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_liveness_probe_is_answered_without_a_token() {
    let (url, _, _) = serve(HttpOptions::default()).await;
    let base = reqwest::Url::parse(&url).expect("a URL");
    let health = base.join("/healthz").expect("the probe's URL");
    let answer = reqwest::Client::new()
        .get(health)
        .header("host", "10.1.2.3:8080")
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.expect("a body"), "ok\n");
    let refused = reqwest::Client::new()
        .get(&url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("an answer");
    assert_eq!(refused.status(), 401);
}

/// The attack: a client opens standing streams (stateless `subscriptions/listen` answers, or
/// the GET streams of its sessions) until they hold every connection the server accepts
/// (1,024): with a static token they never end, and no other client can connect. One client
/// holds at most a quarter of them; another is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_hold_every_connection_with_standing_streams() {
    let (url, _, _) = serve(HttpOptions::default()).await;
    let client = reqwest::Client::new();
    let listening = |token: &'static str| crate::stateless_listen(&client, &url, token).send();
    let mut streams = Vec::new();
    for _ in 0..256 {
        let stream = listening(ALICE).await.expect("a stream");
        assert_eq!(stream.status(), 200);
        streams.push(stream);
    }
    let refused = listening(ALICE).await.expect("an answer");
    assert_eq!(refused.status(), 429);
    let why = refused.text().await.expect("a body");
    assert!(why.contains("256 streams open"), "{why}");
    // Another client is served.
    let bob = listening(BOB).await.expect("a stream");
    assert_eq!(bob.status(), 200);
    // And alice's requests other than standing streams: she opens a session.
    let session = open(&url, ALICE).await;
    assert!(!session.is_empty());
}
