//! MCP's tasks extension: a tool that may run as a task answers a client that declared the
//! extension with a task (from the point its call says it becomes one), served by `tasks/get`
//! and `tasks/cancel`; a client that did not declare it calls such a tool as any other, and is
//! refused one that must run as a task.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use llm_worker::mcp::{AuditLog, McpOptions, ToolCatalog, ToolGroup};
use llm_worker::{TaskSupport, Tool, ToolDefinition, ToolError, ToolMeta};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::ClientServiceExt;
use serde_json::json;

use crate::serve;

/// Becomes a task (unless `hand_off` is false), runs the CPU for `spin_ms` milliseconds, waits
/// `ms` milliseconds (its input), then says how long it waited; `fail` makes it fail as a
/// tool, `broken` fail inside.
struct Slow;

/// The CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).expect("a CPU time"),
        u32::try_from(now.tv_nsec).expect("nanoseconds"),
    )
}

#[async_trait]
impl Tool for Slow {
    async fn execute(&self, input_json: &str) -> Result<String, ToolError> {
        let input: serde_json::Value = serde_json::from_str(input_json)
            .map_err(|e| ToolError::InvalidArgument(e.to_string()))?;
        // It becomes a task now, unless told to run to its end in the request.
        if input["hand_off"] != false {
            llm_worker::task::start();
        }
        // `spin_ms` of the CPU, however busy the machine, in slices of 20 ms of this thread's
        // CPU time, each its own poll: what a plugin's code does between its yields (and the
        // hand-off's answer, woken on this thread, goes out after the first).
        let slices = input["spin_ms"].as_u64().unwrap_or(0).div_ceil(20);
        for _ in 0..slices {
            let slice = thread_cpu();
            while thread_cpu() - slice < Duration::from_millis(20) {
                std::hint::black_box(slice);
            }
            tokio::task::yield_now().await;
        }
        let ms = input["ms"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        match input["outcome"].as_str() {
            Some("fail") => Err(ToolError::ExecutionFailed("it failed as asked".into())),
            // Its text as a plugin might write it: an escape sequence, a megabyte.
            Some("broken") => Err(ToolError::Internal(format!(
                "it broke inside\u{1b}[2J{}",
                "x".repeat(1 << 20)
            ))),
            _ => Ok(format!("waited {ms} ms")),
        }
    }
}

fn slow(name: &'static str, support: TaskSupport) -> ToolDefinition {
    Arc::new(move || {
        let meta = ToolMeta::new(name)
            .description("Waits")
            .input_schema(json!({"type": "object"}))
            .task_support(support);
        (meta, Arc::new(Slow) as Arc<dyn Tool>)
    })
}

async fn server() -> String {
    let group = ToolGroup::new("slow", 1, || {
        vec![
            slow("maybe_later", TaskSupport::Optional),
            slow("always_later", TaskSupport::Required),
            slow("now", TaskSupport::Forbidden),
        ]
    });
    // A replica's prefix, as `--session-prefix r1-` gives it: a balancer routes on it.
    let mut options = McpOptions::new("tasks", "1");
    options.tasks = llm_worker::task::TaskStore::with_options(
        llm_worker::task::TaskOptions::default().prefix("r1-task-"),
    );
    serve(ToolCatalog::new([group]), options).await
}

fn call(name: &str, input: serde_json::Value) -> CallToolRequestParams {
    let mut call = CallToolRequestParams::new(name.to_owned());
    call.arguments = input.as_object().cloned();
    call
}

/// A client that takes tasks, connected to `url`.
async fn tasks_client(url: &str) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig> {
    takes_tasks()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url,
        ))
        .await
        .expect("initialize")
}

/// A client that takes tasks and answers elicitations (through `tasks/update`), connected to
/// `url`.
async fn eliciting_tasks_client(
    url: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig> {
    let mut capabilities = ClientCapabilities::builder().enable_tasks().build();
    capabilities.elicitation = Some(Default::default());
    ClientConfig::new(capabilities, Implementation::new("tasks-test", "1"))
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url,
        ))
        .await
        .expect("initialize")
}

/// Starts the conformance plugin's `confirm_delete` as a task (it asks to confirm); its id.
async fn confirm_delete_task(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
) -> String {
    let created = client
        .call_tool_once(call("confirm_delete", json!({"filename": "a.txt"})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    created.task.task_id
}

fn takes_tasks() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("tasks-test", "1"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_takes_tasks_gets_one_and_its_result() {
    let url = server().await;
    let client = tasks_client(&url).await;
    let created = client
        .call_tool_once(call("maybe_later", json!({"ms": 300})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    assert_eq!(created.task.status, TaskStatus::Working);
    assert!(
        created.task.task_id.starts_with("r1-task-"),
        "{}",
        created.task.task_id
    );
    let id = created.task.task_id.clone();
    let done = loop {
        let task = client
            .get_task(GetTaskParams::new(&id))
            .await
            .expect("tasks/get");
        if task.task.status() != TaskStatus::Working {
            break task;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done.task.status(), TaskStatus::Completed);
    assert_eq!(completed_text(&done), "waited 300 ms");

    // A tool's failure is a completed task whose result is an error; a failure inside is a
    // failed task.
    for (outcome, status) in [
        ("fail", TaskStatus::Completed),
        ("broken", TaskStatus::Failed),
    ] {
        let created = client
            .call_tool_once(call("maybe_later", json!({"ms": 0, "outcome": outcome})))
            .await
            .expect("call");
        let CallToolResponse::Task(created) = created else {
            panic!("a task was expected: {created:?}");
        };
        let ended = loop {
            let task = client
                .get_task(GetTaskParams::new(&created.task.task_id))
                .await
                .expect("tasks/get");
            if task.task.status() != TaskStatus::Working {
                break task;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(ended.task.status(), status, "{outcome}");
        match (&ended.task.payload, outcome) {
            (TaskPayload::Completed { result }, "fail") => assert_eq!(result["isError"], true),
            (TaskPayload::Failed { error }, "broken") => {
                // Said once, cut as a log message is, shown plainly: a protocol error's message
                // is shown and logged whole.
                let message = error["message"].as_str().expect("a message");
                assert!(
                    message.starts_with("Internal error: it broke inside\u{fffd}[2J"),
                    "{}",
                    &message[..64]
                );
                assert!(message.len() < 5_000, "{} bytes", message.len());
            }
            (other, _) => panic!("{outcome}: {other:?}"),
        }
    }

    // A long task, cancelled: it ends cancelled, and cancelling again is acknowledged.
    let created = client
        .call_tool_once(call("always_later", json!({"ms": 60_000})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    let id = created.task.task_id;
    client
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("tasks/cancel");
    let cancelled = client
        .get_task(GetTaskParams::new(&id))
        .await
        .expect("tasks/get");
    assert_eq!(cancelled.task.status(), TaskStatus::Cancelled);
    client
        .cancel_task(CancelTaskParams::new(id))
        .await
        .expect("a second cancel is acknowledged too");

    // An id the server never gave, or another session's, is unknown.
    let unknown = client
        .get_task(GetTaskParams::new(
            "r1-task-0123456789abcdef0123456789abcdef",
        ))
        .await;
    assert!(
        format!("{unknown:?}").contains("-32602")
            || format!("{unknown:?}").contains("InvalidParams")
            || format!("{unknown:?}").contains("no task"),
        "{unknown:?}"
    );
    let other = takes_tasks()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    let theirs = other
        .get_task(GetTaskParams::new(&done.task.task.task_id))
        .await;
    assert!(theirs.is_err(), "another session read the task: {theirs:?}");
    other.cancel().await.expect("close");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_tasks_calls_optional_tools_and_is_refused_required_ones() {
    let url = server().await;
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    let answered = client
        .call_tool_once(call("maybe_later", json!({"ms": 10})))
        .await
        .expect("call");
    assert!(
        matches!(&answered, CallToolResponse::Complete(result) if crate::greeting(result) == "waited 10 ms"),
        "{answered:?}"
    );
    let refused = client
        .call_tool_once(call("always_later", json!({"ms": 10})))
        .await;
    let message = format!("{refused:?}");
    assert!(
        message.contains("-32021") || message.contains("Missing required client capability"),
        "{message}"
    );
    client.cancel().await.expect("close");
}

/// The text of a completed task's result.
fn completed_text(task: &rmcp::model::GetTaskResult) -> String {
    match &task.task.payload {
        TaskPayload::Completed { result } => result["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("a text result was expected: {result:?}"))
            .to_owned(),
        other => panic!("a result was expected: {other:?}"),
    }
}

/// Polls the task until its status is not `working`.
async fn settled<C: rmcp::service::Service<rmcp::RoleClient>>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, C>,
    id: &str,
) -> rmcp::model::GetTaskResult {
    for _ in 0..400 {
        let task = client
            .get_task(GetTaskParams::new(id))
            .await
            .expect("tasks/get");
        if task.task.status() != TaskStatus::Working {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("task {id} stayed working");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_questions_are_its_input_requests_answered_by_tasks_update() {
    let conformance = llm_worker_tests::plugin("conformance");
    let url = serve(
        ToolCatalog::from_plugins([&conformance]),
        McpOptions::new("tasks", "1"),
    )
    .await;
    let client = eliciting_tasks_client(&url).await;
    let id = confirm_delete_task(&client).await;
    let waiting = settled(&client, &id).await;
    assert_eq!(waiting.task.status(), TaskStatus::InputRequired);
    let TaskPayload::InputRequired { input_requests } = &waiting.task.payload else {
        panic!("input requests were expected: {:?}", waiting.task.payload);
    };
    let request = serde_json::to_value(&input_requests["confirm"]).expect("json");
    assert_eq!(request["method"], "elicitation/create", "{request}");
    // The message the client shows names the plugin and the tool first.
    let message = request["params"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("confirm_delete") && message.contains("Delete a.txt?"),
        "{message}"
    );
    client
        .update_task(UpdateTaskParams::new(
            &id,
            [(
                "confirm".to_owned(),
                json!({"action": "accept", "content": {"confirm": true}}),
            )]
            .into_iter()
            .collect(),
        ))
        .await
        .expect("tasks/update");
    let done = settled(&client, &id).await;
    assert_eq!(done.task.status(), TaskStatus::Completed);
    assert_eq!(completed_text(&done), "Deleted a.txt");

    // Two questions at once, answered one at a time.
    let created = client
        .call_tool_once(call("multi_input", json!({})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    let id = created.task.task_id;
    let keys = loop {
        let task = settled(&client, &id).await;
        if let TaskPayload::InputRequired { input_requests } = &task.task.payload
            && input_requests.len() == 2
        {
            break input_requests.keys().cloned().collect::<Vec<_>>();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(keys, ["first", "second"]);
    let answer = |name: &str| json!({"action": "accept", "content": {"name": name}});
    client
        .update_task(UpdateTaskParams::new(
            &id,
            [("first".to_owned(), answer("one"))].into_iter().collect(),
        ))
        .await
        .expect("tasks/update");
    let partly = settled(&client, &id).await;
    assert_eq!(partly.task.status(), TaskStatus::InputRequired);
    let TaskPayload::InputRequired { input_requests } = &partly.task.payload else {
        panic!("input requests were expected: {:?}", partly.task.payload);
    };
    assert_eq!(input_requests.keys().collect::<Vec<_>>(), ["second"]);
    client
        .update_task(UpdateTaskParams::new(
            &id,
            [("second".to_owned(), answer("two"))].into_iter().collect(),
        ))
        .await
        .expect("tasks/update");
    let done = settled(&client, &id).await;
    assert_eq!(completed_text(&done), "first: one, second: two");
    client.cancel().await.expect("close");
}

/// A task's questions, answered through `tasks/update` after its hand-off, are in the audit log
/// as a request's are, and an answer the host refuses (it does not fit the form) is not
/// recorded as accepted: the task's own check of it fails the question (`unanswered`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_questions_are_audited_with_the_hosts_verdict() {
    let log = crate::Shared::default();
    let conformance = llm_worker_tests::plugin("conformance");
    let url = serve(
        ToolCatalog::from_plugins([&conformance]),
        McpOptions::new("tasks", "1").audit(AuditLog::to_writer(log.clone())),
    )
    .await;
    let client = eliciting_tasks_client(&url).await;
    for confirm in [json!("yes"), json!(true)] {
        let id = confirm_delete_task(&client).await;
        assert_eq!(
            settled(&client, &id).await.task.status(),
            TaskStatus::InputRequired
        );
        let answer = json!({"action": "accept", "content": {"confirm": confirm}});
        client
            .update_task(UpdateTaskParams::new(
                &id,
                [("confirm".to_owned(), answer)].into_iter().collect(),
            ))
            .await
            .expect("tasks/update");
        let ended = settled(&client, &id).await;
        assert_ne!(ended.task.status(), TaskStatus::InputRequired);
    }
    client.cancel().await.expect("close");
    let questions: Vec<(String, String)> = log
        .records()
        .iter()
        .filter(|record| record["event"] == "question")
        .map(|record| {
            (
                record["target"].as_str().unwrap_or_default().to_owned(),
                record["outcome"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let asked = "elicitation by tool 'confirm_delete' of plugin 'conformance'".to_owned();
    assert_eq!(
        questions,
        [
            (asked.clone(), "unanswered".to_owned()),
            (asked, "accepted".to_owned())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_never_hands_off_is_answered_as_it_ended() {
    let url = server().await;
    let client = tasks_client(&url).await;
    // A tool that may run as a task, but did not become one: its result.
    let answered = client
        .call_tool_once(call("maybe_later", json!({"ms": 10, "hand_off": false})))
        .await
        .expect("call");
    assert!(
        matches!(&answered, CallToolResponse::Complete(result) if crate::greeting(result) == "waited 10 ms"),
        "{answered:?}"
    );
    // One that must: a task, which ended.
    let created = client
        .call_tool_once(call("always_later", json!({"ms": 10, "hand_off": false})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    let done = settled(&client, &created.task.task_id).await;
    assert_eq!(completed_text(&done), "waited 10 ms");
    client.cancel().await.expect("close");
}

/// The attack: other clients' kept task results fill the server's budget; a call that may run
/// as a task but ends in its request was refused its result ("more than this server can keep"),
/// though no result of it is kept. Now it is answered as it ended; a task's result is still
/// held to the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_budget_for_kept_results_does_not_take_a_calls_answer_in_its_request() {
    let group = ToolGroup::new("slow", 1, || {
        vec![
            slow("maybe_later", TaskSupport::Optional),
            slow("always_later", TaskSupport::Required),
        ]
    });
    let mut options = McpOptions::new("tasks", "1");
    // No room at all: as if other clients' results had filled it.
    options.tasks = llm_worker::task::TaskStore::with_options(
        llm_worker::task::TaskOptions::default().max_kept_bytes(0),
    );
    let url = serve(ToolCatalog::new([group]), options).await;
    let client = tasks_client(&url).await;
    let answered = client
        .call_tool_once(call("maybe_later", json!({"ms": 1, "hand_off": false})))
        .await
        .expect("call");
    assert!(
        matches!(&answered, CallToolResponse::Complete(result) if crate::greeting(result) == "waited 1 ms"),
        "{answered:?}"
    );
    // A task's result is kept, and the budget applies to it.
    let created = client
        .call_tool_once(call("always_later", json!({"ms": 1, "hand_off": false})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    let done = settled(&client, &created.task.task_id).await;
    assert!(
        format!("{done:?}").contains("more than this server can keep"),
        "{done:?}"
    );
    client.cancel().await.expect("close");
}

/// A client that takes tasks and answers every form with the name "Alice", counting the forms.
struct Alice {
    asked: Arc<std::sync::atomic::AtomicUsize>,
    /// The log messages it was sent.
    logs: Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Alice {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::builder().enable_tasks().build();
        capabilities.elicitation = Some(Default::default());
        ClientConfig::new(capabilities, Implementation::new("alice", "1"))
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(
            serde_json::from_value(json!({"action": "accept", "content": {"name": "Alice"}}))
                .expect("an answer"),
        )
    }

    // Logging is deprecated by SEP-2577, and still part of the revisions the server serves.
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.logs
            .lock()
            .expect("logs")
            .push(params.data.as_str().unwrap_or_default().to_owned());
    }
}

/// The fixture that asks a name in its request, then becomes a task (`manual_start`).
async fn gathering_server() -> String {
    let conformance = llm_worker_tests::plugin("conformance");
    serve(
        ToolCatalog::from_plugins([&conformance]),
        McpOptions::new("tasks", "1"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// Logging is deprecated by SEP-2577, and still part of the revisions the server serves.
#[allow(deprecated)]
async fn a_call_asks_in_its_request_and_then_becomes_a_task() {
    let url = gathering_server().await;
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let logs = Arc::default();
    let client = Alice {
        asked: Arc::clone(&asked),
        logs: Arc::clone(&logs),
    }
    .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
        url.as_str(),
    ))
    .await
    .expect("initialize");
    client
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Info,
        ))
        .await
        .expect("logging/setLevel");
    let created = client
        .call_tool_once(call("test_tool_with_task", json!({})))
        .await
        .expect("call");
    // The question was put to the client while the request was open (not as the task's
    // input request), and the answer reached the task.
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    let done = settled(&client, &created.task.task_id).await;
    assert_eq!(completed_text(&done), "Hello, Alice!");
    // What it logged before the hand-off reached the client as the request's, and what it
    // logged after reached the session's client on the session's own stream (the two streams
    // may deliver them in either order, the first a moment after the answer; the task's id
    // is in the second's `_meta`, which rmcp's client does not pass to its handler:
    // `reports::tests::a_tasks_log_names_its_task_on_the_wire`).
    for _ in 0..200 {
        if logs.lock().expect("logs").len() > 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut messages = logs.lock().expect("logs").clone();
    messages.sort();
    assert_eq!(
        messages,
        ["asking the user's name", "greeting Alice"],
        "the call's logs before and after its hand-off"
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_gathers_input_in_rounds_and_then_becomes_a_task() {
    let url = gathering_server().await;
    let mut capabilities = ClientCapabilities::builder().enable_tasks().build();
    capabilities.elicitation = Some(Default::default());
    let client = crate::stateless_client(
        ClientConfig::new(capabilities, Implementation::new("rounds", "1")),
        &url,
    )
    .await;
    // Round 1: the question, not a task.
    let first = client
        .call_tool_once(call("test_tool_with_task", json!({})))
        .await
        .expect("call");
    let CallToolResponse::InputRequired(first) = first else {
        panic!("input_required was expected: {first:?}");
    };
    let requests = first.input_requests.clone().unwrap_or_default();
    assert_eq!(requests.keys().collect::<Vec<_>>(), ["user_name"]);
    // Round 2: the answer, and the task, which carries no request state.
    let mut retry = call("test_tool_with_task", json!({}));
    retry.input_responses = Some(
        [(
            "user_name".to_owned(),
            serde_json::from_value(json!({"action": "accept", "content": {"name": "Alice"}}))
                .expect("a response"),
        )]
        .into_iter()
        .collect(),
    );
    retry.request_state = first.request_state.clone();
    let second = client.call_tool_once(retry).await.expect("call");
    let CallToolResponse::Task(created) = second else {
        panic!("a task was expected: {second:?}");
    };
    let wire = serde_json::to_value(&created).expect("json");
    assert!(wire.get("requestState").is_none(), "{wire}");
    let done = settled(&client, &created.task.task_id).await;
    assert_eq!(completed_text(&done), "Hello, Alice!");
    client.cancel().await.expect("close");
}

/// A sampling request says first, in its system prompt, which plugin and tool ask, on every
/// way it reaches a client: deferred to the client in a 2026-07-28 call's input requests, and
/// as a task's input request (the direct way: `command::protocol`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampling_request_names_its_plugin_and_tool_when_deferred_and_in_a_task() {
    fn system_prompt(request: &impl serde::Serialize) -> String {
        let request = serde_json::to_value(request).expect("json");
        assert_eq!(request["method"], "sampling/createMessage", "{request}");
        request["params"]["systemPrompt"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
    let mut policy = llm_worker::SandboxPolicy::default();
    policy.client = llm_worker::ClientPolicy::default().sampling(true);
    let asker = llm_worker_tests::host()
        .load_with_policy(llm_worker_tests::plugin_path("asker"), policy)
        .expect("load");
    let url = serve(
        ToolCatalog::from_plugins([&asker]),
        McpOptions::new("tasks", "1"),
    )
    .await;

    let mut capabilities = ClientCapabilities::builder().build();
    capabilities.sampling = Some(Default::default());
    let deferring = crate::stateless_client(
        ClientConfig::new(capabilities, Implementation::new("rounds", "1")),
        &url,
    )
    .await;
    let first = deferring
        .call_tool_once(call("converse", json!({"count": 1, "text": "hi"})))
        .await
        .expect("call");
    let CallToolResponse::InputRequired(first) = first else {
        panic!("input_required was expected: {first:?}");
    };
    let requests = first.input_requests.unwrap_or_default();
    assert_eq!(
        system_prompt(&requests["converse"]),
        "[plugin 'asker', tool 'converse' asks]"
    );
    deferring.cancel().await.expect("close");

    let mut capabilities = ClientCapabilities::builder().enable_tasks().build();
    capabilities.sampling = Some(Default::default());
    let tasks = ClientConfig::new(capabilities, Implementation::new("tasks-test", "1"))
        .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
            url.as_str(),
        ))
        .await
        .expect("initialize");
    let created = tasks
        .call_tool_once(call("converse", json!({"count": 1, "text": "hi"})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    let waiting = settled(&tasks, &created.task.task_id).await;
    let TaskPayload::InputRequired { input_requests } = &waiting.task.payload else {
        panic!("input requests were expected: {:?}", waiting.task.payload);
    };
    assert_eq!(
        system_prompt(&input_requests["converse"]),
        "[plugin 'asker', tool 'converse' asks]"
    );
    tasks.cancel().await.expect("close");
}

/// The attack: a task waits on a large question (a sampling request of tens of kilobytes)
/// and its client floods `tasks/get`. Each poll copies the question into its answer, as a
/// poll of a completed task copies the result: it is charged against the client's memory for
/// requests the same way, and refused past the client's part, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_a_task_waiting_on_a_large_question_is_charged_for_the_copies() {
    let mut policy = llm_worker::SandboxPolicy::default();
    policy.client = llm_worker::ClientPolicy::default().sampling(true);
    let asker = llm_worker_tests::host()
        .load_with_policy(llm_worker_tests::plugin_path("asker"), policy)
        .expect("load");
    // The first poll that finds the question: its error, or the task's status then.
    async fn poll_the_question(
        memory: usize,
        asker: &llm_worker::LoadedPlugin,
    ) -> Result<TaskStatus, String> {
        let url = crate::serve_with(
            ToolCatalog::from_plugins([asker]),
            McpOptions::new("tasks", "1"),
            llm_worker::mcp::HttpOptions::default()
                .named_tokens([llm_worker::mcp::BearerToken::new(
                    "alice",
                    crate::access::ALICE,
                )])
                .max_body_bytes(64 << 10)
                .max_request_memory(memory),
        )
        .await;
        let mut capabilities = ClientCapabilities::builder().enable_tasks().build();
        capabilities.sampling = Some(Default::default());
        let client = ClientConfig::new(capabilities, Implementation::new("tasks-test", "1"))
            .serve(rmcp::transport::StreamableHttpClientTransport::from_config(
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .auth_header(crate::access::ALICE),
            ))
            .await
            .expect("initialize");
        let created = client
            .call_tool_once(call(
                "converse",
                json!({"count": 3, "text": "x".repeat(21_000)}),
            ))
            .await
            .expect("call");
        let CallToolResponse::Task(created) = created else {
            panic!("a task was expected");
        };
        let polled = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match client
                    .get_task(GetTaskParams::new(&created.task.task_id))
                    .await
                {
                    Ok(task) if task.task.status() == TaskStatus::Working => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok(task) => return Ok(task.task.status()),
                    Err(error) => return Err(error.to_string()),
                }
            }
        })
        .await
        .expect("the task asked");
        client.cancel().await.expect("close");
        polled
    }
    // A quarter of 512 KiB for the client: its call's arguments (some 21 KiB, held while the
    // task runs) and two copies of the question (three messages of them, some 63 KiB) do not
    // fit.
    let refused = poll_the_question(512 << 10, &asker).await;
    let Err(refused) = refused else {
        panic!("the copies do not fit the client's part: {refused:?}");
    };
    assert!(
        refused.contains("cannot be sent now") && refused.contains("128 KiB"),
        "{refused}"
    );
    // With 256 KiB for the client, they do.
    assert_eq!(
        poll_the_question(1 << 20, &asker).await,
        Ok(TaskStatus::InputRequired)
    );
}

/// Says when its call started, and when its call was dropped; never ends, and hands off only
/// when its input says `hand_off`.
struct Held {
    started: Arc<tokio::sync::Notify>,
    dropped: Arc<tokio::sync::Notify>,
}

/// Tells `Held`'s test that the call's future was dropped.
struct Dropped(Arc<tokio::sync::Notify>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

#[async_trait]
impl Tool for Held {
    async fn execute(&self, input_json: &str) -> Result<String, ToolError> {
        let _dropped = Dropped(Arc::clone(&self.dropped));
        if input_json.contains("hand_off") {
            llm_worker::task::start();
        }
        self.started.notify_one();
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cancelled_before_its_hand_off_takes_its_task_with_it() {
    let (url, started, dropped) = held_server().await;
    let client = tasks_client(&url).await;
    // The call starts inside its request; the client gives up on the request (its future is
    // dropped: rmcp sends `notifications/cancelled`).
    tokio::select! {
        answered = client.call_tool_once(call("held", json!({}))) => {
            panic!("the held call answered: {answered:?}");
        }
        () = started.notified() => {}
    }
    // A liveness bound far above what it takes: the call is dropped with its request.
    tokio::time::timeout(Duration::from_secs(30), dropped.notified())
        .await
        .expect("the call was dropped with its request");
    // Its task went with it: the owner's one place is free for the next.
    let created = client
        .call_tool_once(call("maybe_later", json!({"ms": 10})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    assert_eq!(
        completed_text(&settled(&client, &created.task.task_id).await),
        "waited 10 ms"
    );
    client.cancel().await.expect("close");
}

/// The attack: a client starts a task that never ends and closes its session; the task, its
/// call and the instance it runs in stayed behind, for as long as the task's time limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_sessions_tasks_end_with_it() {
    let (url, started, dropped) = held_server().await;
    let client = tasks_client(&url).await;
    let created = held_task(&client).await;
    assert_eq!(created.task.status, TaskStatus::Working);
    started.notified().await;
    client.cancel().await.expect("close");
    // A liveness bound far above what it takes: the task's call is dropped with the session.
    tokio::time::timeout(Duration::from_secs(30), dropped.notified())
        .await
        .expect("the task's call was dropped with its session");
}

/// A task outlives its request, not the service of its plugin: a group the catalog no longer
/// holds (under `--watch`: the plugin changed or was removed, its signer revoked) ended its
/// tasks only at their time limit, its instance (with its grants and secrets) running till
/// then. Now they end at once, failed, saying why; for a stateless client too, whose session
/// takes nothing in after its request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_ends_when_its_plugin_is_no_longer_served() {
    for stateless in [false, true] {
        let (catalog, options, started, dropped) = held_tools();
        let url = serve(catalog.clone(), options).await;
        let client = if stateless {
            crate::stateless_client(takes_tasks(), &url).await
        } else {
            tasks_client(&url).await
        };
        let created = held_task(&client).await;
        started.notified().await;
        catalog.replace([]);
        // A liveness bound far above what it takes (the task's own limit is minutes).
        tokio::time::timeout(Duration::from_secs(30), dropped.notified())
            .await
            .expect("the task's call was dropped when its plugin left the catalog");
        let task = settled(&client, &created.task.task_id).await;
        match &task.task.payload {
            TaskPayload::Failed { error } => assert!(
                error["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("no longer served")),
                "{error:?}"
            ),
            other => panic!("a failed task was expected ({stateless}): {other:?}"),
        }
        client.cancel().await.expect("close");
    }
}

/// Starts `held` (see [`Held`]) as a task that hands off at once: the task the client is
/// answered with.
async fn held_task(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
) -> rmcp::model::CreateTaskResult {
    let created = client
        .call_tool_once(call("held", json!({"hand_off": true})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    created
}

/// A server of `held` (see [`Held`]) and `maybe_later`, keeping one task per owner: its URL,
/// and what says when `held`'s call started and when it was dropped.
async fn held_server() -> (String, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
    let (catalog, options, started, dropped) = held_tools();
    let url = serve(catalog, options).await;
    (url, started, dropped)
}

/// What [`held_server`] serves, and what says when `held`'s call started and was dropped.
fn held_tools() -> (
    ToolCatalog,
    McpOptions,
    Arc<tokio::sync::Notify>,
    Arc<tokio::sync::Notify>,
) {
    let started = Arc::new(tokio::sync::Notify::new());
    let dropped = Arc::new(tokio::sync::Notify::new());
    let (tool_started, tool_dropped) = (Arc::clone(&started), Arc::clone(&dropped));
    let group = ToolGroup::new("held", 1, move || {
        let (started, dropped) = (Arc::clone(&tool_started), Arc::clone(&tool_dropped));
        let held: ToolDefinition = Arc::new(move || {
            let meta = ToolMeta::new("held")
                .description("Holds")
                .input_schema(json!({"type": "object"}))
                .task_support(TaskSupport::Optional);
            let tool = Held {
                started: Arc::clone(&started),
                dropped: Arc::clone(&dropped),
            };
            (meta, Arc::new(tool) as Arc<dyn Tool>)
        });
        vec![held, slow("maybe_later", TaskSupport::Optional)]
    });
    // One task per owner: a call not handed off yet holds that place.
    let mut options = McpOptions::new("tasks", "1");
    options.tasks = llm_worker::task::TaskStore::with_options(
        llm_worker::task::TaskOptions::default().max_tasks_per_owner(1),
    );
    (ToolCatalog::new([group]), options, started, dropped)
}

/// Alice's client (taking tasks) of a server of `maybe_later` (may run as a task) and `now`
/// (may not), under an access policy whose quota is `quota` (a line of `[quota]`).
async fn alice_under_quota(
    quota: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig> {
    use llm_worker::mcp::{AccessPolicy, BearerToken, HttpOptions};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    const TOKEN: &str = "alice-token-0123456789abcdef";
    let policy = AccessPolicy::parse(&format!(
        "[quota]\n{quota}\n\n[[grant]]\nwho = [\"token:alice\"]\ntools = [\"*\"]\n"
    ))
    .expect("a policy");
    let group = ToolGroup::new("slow", 1, || {
        vec![
            slow("maybe_later", TaskSupport::Optional),
            slow("now", TaskSupport::Forbidden),
        ]
    });
    let url = crate::serve_with(
        ToolCatalog::new([group]),
        McpOptions::new("tasks", "1").access(policy),
        HttpOptions::default().named_tokens([BearerToken::new("alice", TOKEN)]),
    )
    .await;
    takes_tasks()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(TOKEN),
        ))
        .await
        .expect("initialize")
}

/// The attack: a call that became a task ran on after its request answered, and the request
/// was all the quota counted; an identity allowed one call at a time could keep any number of
/// tasks running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_counts_as_its_identitys_running_call_until_it_ends() {
    let client = alice_under_quota("concurrent_calls = 1").await;
    let created = client
        .call_tool_once(call("maybe_later", json!({"ms": 60_000})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    // The task runs: it is the one call Alice may have running.
    crate::assert_over_quota(
        client.call_tool(call("now", json!({"ms": 0}))).await,
        "alice is over its quota of 1 concurrent calls",
        "a second call while the task runs",
    );
    // Its end frees the place.
    client
        .cancel_task(CancelTaskParams::new(&created.task.task_id))
        .await
        .expect("tasks/cancel");
    let mut answered = None;
    for _ in 0..100 {
        match client.call_tool(call("now", json!({"ms": 0}))).await {
            Ok(result) => {
                answered = Some(result);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let answered = answered.expect("a call once the task was cancelled");
    assert_eq!(answered.is_error, Some(false), "{answered:?}");
    client.cancel().await.expect("close");
}

/// The attack: a task's CPU time was counted against its identity's quota only when the task
/// ended, so an identity could spin tasks for as long as their time limit let them, never
/// refused meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_tasks_cpu_time_counts_against_the_quota_while_it_runs() {
    let client = alice_under_quota("cpu_seconds_per_minute = 1").await;
    // A task that spins for a minute.
    let created = client
        .call_tool_once(call("maybe_later", json!({"spin_ms": 60_000})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    // Once it has spun past the quota's second, Alice is refused, while it still runs (a
    // liveness bound far above the second it takes).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let refused = loop {
        match client.call_tool(call("now", json!({"ms": 0}))).await {
            Err(refused) => break refused,
            Ok(_) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "never refused while the task spun"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    crate::assert_over_quota(
        Err::<(), _>(refused),
        "alice is over its quota of 1 CPU seconds per minute",
        "a call while the task spins",
    );
    let task = client
        .get_task(GetTaskParams::new(&created.task.task_id))
        .await
        .expect("tasks/get");
    assert_eq!(task.task.status(), TaskStatus::Working, "it still runs");
    client
        .cancel_task(CancelTaskParams::new(&created.task.task_id))
        .await
        .expect("tasks/cancel");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_progress_is_its_status_message() {
    use llm_worker::{HttpGrant, SandboxPolicy};
    let (site, gate) = llm_worker_tests::http_server::TestServer::held("task body");
    let mut sandbox = SandboxPolicy::default();
    sandbox
        .http
        .push(HttpGrant::parse(&format!("http://127.0.0.1:{}", site.port())).expect("rule"));
    let waiter = llm_worker_tests::host()
        .load_with_policy(llm_worker_tests::plugin_path("waiter"), sandbox)
        .unwrap_or_else(|e| panic!("{e}"));
    let url = serve(
        ToolCatalog::from_plugins([&waiter]),
        McpOptions::new("tasks", "1"),
    )
    .await;
    let client = tasks_client(&url).await;
    let page = format!("http://127.0.0.1:{}/", site.port());
    let created = client
        .call_tool_once(call("fetch", json!({ "url": page })))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    let id = created.task.task_id.clone();
    // It reports progress, then waits for the response the test holds: `tasks/get` says so.
    let mut message = None;
    for _ in 0..200 {
        let task = client
            .get_task(GetTaskParams::new(&id))
            .await
            .expect("tasks/get");
        assert_eq!(task.task.status(), TaskStatus::Working);
        message = task.task.task.status_message.clone();
        if message.as_deref() != Some("running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(message.as_deref(), Some("fetching (1 of 2)"));
    gate.open();
    assert_eq!(completed_text(&settled(&client, &id).await), "1 task body");
    client.cancel().await.expect("close");
}

/// The audit log follows a call that became a task to its end: the call's record names the
/// task, and the task's record says how it ended, how long the call took, and the CPU time of
/// all its code, what ran after the hand-off included (a spin after it: the call's own record,
/// written at the hand-off, shows next to none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_end_is_audited_with_the_cpu_time_of_all_its_code() {
    let log = crate::Shared::default();
    let group = ToolGroup::new("slow", 1, || {
        vec![slow("maybe_later", TaskSupport::Optional)]
    });
    let options = McpOptions::new("tasks", "1").audit(AuditLog::to_writer(log.clone()));
    let url = serve(ToolCatalog::new([group]), options).await;
    let client = tasks_client(&url).await;
    let created = client
        .call_tool_once(call("maybe_later", json!({"spin_ms": 300})))
        .await
        .expect("call");
    let CallToolResponse::Task(created) = created else {
        panic!("a task was expected: {created:?}");
    };
    let id = created.task.task_id;
    // The task's record is written once it ended.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let records = loop {
        let records = log.records();
        if records.iter().any(|record| record["event"] == "task") {
            break records;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no record of the task's end: {records:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let [call, task] = &records[..] else {
        panic!("two records were expected: {records:?}");
    };
    assert_eq!(call["event"], "tools/call");
    assert_eq!(call["outcome"], "task");
    assert_eq!(call["task"], id.as_str());
    assert_eq!(task["event"], "task");
    assert_eq!(task["target"], "maybe_later");
    assert_eq!(task["outcome"], "ok");
    assert_eq!(task["task"], id.as_str());
    assert_eq!(task["input_sha256"], call["input_sha256"]);
    let (call_cpu, task_cpu) = (
        call["cpu_ms"].as_f64().expect("cpu_ms"),
        task["cpu_ms"].as_f64().expect("cpu_ms"),
    );
    // 300 ms of the CPU spun after the hand-off.
    assert!(task_cpu >= 250.0 && call_cpu < 50.0, "{records:?}");
    assert!(
        task["duration_ms"].as_f64().expect("duration") >= 300.0,
        "{records:?}"
    );
}

/// The attack: clients fill the server's task store with tasks that ended at once, then close
/// their sessions and open new ones; the ended sessions' tasks, which no one could ask for
/// again, kept their places for their hour to live, and every other client's calls of tools
/// that may run as tasks were refused meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_sessions_tasks_give_their_places_back() {
    let group = ToolGroup::new("slow", 1, || {
        vec![slow("always_later", TaskSupport::Required)]
    });
    let mut options = McpOptions::new("tasks", "1");
    options.tasks = llm_worker::task::TaskStore::with_options(
        llm_worker::task::TaskOptions::default().max_tasks(2),
    );
    let url = serve(ToolCatalog::new([group]), options).await;
    let filler = tasks_client(&url).await;
    for _ in 0..2 {
        let created = filler
            .call_tool_once(call("always_later", json!({"ms": 0})))
            .await
            .expect("call");
        assert!(matches!(created, CallToolResponse::Task(_)), "{created:?}");
    }
    let other = tasks_client(&url).await;
    let full = other
        .call_tool_once(call("always_later", json!({"ms": 0})))
        .await;
    assert!(format!("{full:?}").contains("most it allows"), "{full:?}");
    filler.cancel().await.expect("close");
    // The session's end is seen a moment after its client closed it; a liveness bound.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let again = other
            .call_tool_once(call("always_later", json!({"ms": 0})))
            .await;
        if matches!(again, Ok(CallToolResponse::Task(_))) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the ended session's tasks still fill the store: {again:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The attack: a client of a stateful session writes a protocol version into its requests'
/// `_meta`, as a stateless client does (the stateless revision's, or the very version its
/// session negotiated), so that its tasks are its caller's rather than its session's and
/// outlive the session (their calls and instance with them). Over rmcp's HTTP service a
/// `_meta` version that differs from the request's header is refused already, and one that
/// names a session is its session's; over other transports (here an in-memory one) a
/// connection opened with `initialize` is a session, whatever `_meta` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cannot_pass_for_stateless_to_keep_its_tasks() {
    for version in [
        rmcp::model::ProtocolVersion::V_2026_07_28,
        rmcp::model::ProtocolVersion::V_2025_11_25,
    ] {
        let (catalog, options, started, dropped) = held_tools();
        let server = llm_worker::mcp::McpServer::new(&catalog, options);
        let (client_end, server_end) = tokio::io::duplex(64 * 1024);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(server_end, async {
            let _ = stopped.await;
        }));
        let client = takes_tasks().serve(client_end).await.expect("initialize");
        let mut request = call("held", json!({"hand_off": true}));
        request.meta = Some(rmcp::model::RequestMetaObject::with_client_context(
            version.clone(),
            Implementation::new("tasks-test", "1"),
            ClientCapabilities::builder().enable_tasks().build(),
        ));
        let created = client.call_tool_once(request).await.expect("call");
        let CallToolResponse::Task(created) = created else {
            panic!("{version}: a task was expected: {created:?}");
        };
        assert_eq!(created.task.status, TaskStatus::Working);
        started.notified().await;
        stop_and_see_dropped(stop, serving, &dropped, &format!("{version}: its session")).await;
    }
}

/// Stops a server `serving` in-memory (`stop`), and waits for the held task's call to be
/// dropped (`dropped`) with `what` (a liveness bound far above what it takes).
async fn stop_and_see_dropped(
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<Result<(), llm_worker::mcp::McpError>>,
    dropped: &tokio::sync::Notify,
    what: &str,
) {
    stop.send(()).expect("the server is serving");
    llm_worker_tests::wait::within("the server to stop", serving)
        .await
        .expect("joined")
        .expect("a clean stop");
    tokio::time::timeout(Duration::from_secs(30), dropped.notified())
        .await
        .unwrap_or_else(|_| panic!("the task's call was not dropped with {what}"));
}

/// The attack: two stateless (2026-07-28) connections over a transport other than HTTP, served
/// from one set of options (one task store), as an embedder serves its connections. Their tasks
/// were one caller's, "stateless": each connection could ask for the other's, and a task
/// outlived its connection with the call and instance it ran in. Over such a transport the
/// connection is the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_connections_tasks_are_its_own_and_end_with_it() {
    let (catalog, options, started, dropped) = held_tools();
    let connect = || {
        let server = llm_worker::mcp::McpServer::new(&catalog, options.clone());
        let (client_end, server_end) = tokio::io::duplex(64 * 1024);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(server_end, async {
            let _ = stopped.await;
        }));
        let client = takes_tasks().serve_with_lifecycle(
            client_end,
            rmcp::service::ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        );
        (client, stop, serving)
    };
    let (first, stop_first, first_serving) = connect();
    let first = first.await.expect("a stateless client");
    let (second, _stop_second, _second_serving) = connect();
    let second = second.await.expect("a stateless client");
    let created = held_task(&first).await;
    started.notified().await;
    let id = created.task.task_id;
    first
        .get_task(GetTaskParams::new(&id))
        .await
        .expect("the first connection's own task");
    let refused = second
        .get_task(GetTaskParams::new(&id))
        .await
        .expect_err("another connection's task");
    assert!(refused.to_string().contains(&id), "{refused}");
    stop_and_see_dropped(stop_first, first_serving, &dropped, "its connection").await;
}

/// A client that does not take tasks, connected to `url`.
async fn plain_client(url: &str) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig> {
    ClientConfig::new(
        ClientCapabilities::builder().build(),
        Implementation::new("plain-test", "1"),
    )
    .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
        url,
    ))
    .await
    .expect("initialize")
}

/// A call, as a task or not, its plugin withdrawn under `--watch` (changed, removed, or its
/// signer revoked) while an operator's hook held it or while it ran: only tasks watched their
/// plugin, so a call that is not a task started the withdrawn revision after the hook approved
/// it (a fresh instance, with the revision's grants and secrets) or went on running it until
/// its limit; and a task's call was polled once before its watch was looked at. Each now ends
/// as soon as the revision is gone, and never starts if it was gone before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_plugin_is_withdrawn_ends_whether_a_hook_held_it_or_it_ran() {
    for takes_tasks in [false, true] {
        // Withdrawn while the hook holds the call.
        let (catalog, options, started, _dropped) = held_tools();
        let (hook, arrived, release) = crate::WaitingHook::new();
        let url = serve(catalog.clone(), options.pre_tool_call_hook(hook)).await;
        let client = if takes_tasks {
            tasks_client(&url).await
        } else {
            plain_client(&url).await
        };
        let withdraw = async {
            arrived.notified().await;
            catalog.replace([]);
            let listed = client.list_all_tools().await.expect("tools/list");
            assert!(listed.is_empty(), "{listed:?}");
            release.notify_one();
        };
        // A liveness bound far above what it takes (a call let run would hold for ever).
        let (answered, ()) = tokio::time::timeout(Duration::from_secs(30), async {
            tokio::join!(client.call_tool_once(call("held", json!({}))), withdraw)
        })
        .await
        .expect("the call ended: its plugin had left the catalog");
        let said = match answered {
            Ok(CallToolResponse::Task(created)) => {
                format!("{:?}", settled(&client, &created.task.task_id).await)
            }
            other => format!("{other:?}"),
        };
        assert!(said.contains("no longer served"), "{takes_tasks}: {said}");
        assert!(
            tokio::time::timeout(Duration::ZERO, started.notified())
                .await
                .is_err(),
            "{takes_tasks}: the withdrawn tool ran"
        );
        client.cancel().await.expect("close");
    }

    // Withdrawn while a call that is not a task runs.
    let (catalog, options, started, dropped) = held_tools();
    let url = serve(catalog.clone(), options).await;
    let client = plain_client(&url).await;
    let withdraw = async {
        started.notified().await;
        catalog.replace([]);
    };
    // A liveness bound far above what it takes (the call would hold for ever).
    let (answered, ()) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(client.call_tool_once(call("held", json!({}))), withdraw)
    })
    .await
    .expect("the call ended: its plugin had left the catalog");
    tokio::time::timeout(Duration::from_secs(30), dropped.notified())
        .await
        .expect("the call was dropped");
    let said = format!("{answered:?}");
    assert!(said.contains("no longer served"), "{said}");
    client.cancel().await.expect("close");
}

/// A pre-call hook that never lets its calls go, saying when one reached it and when its wait
/// was dropped.
#[derive(Default)]
struct NeverHook {
    entered: Arc<tokio::sync::Notify>,
    left: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl llm_worker::PreToolCallHook for NeverHook {
    async fn pre_tool_call(
        &self,
        _: &mut llm_worker::ToolCallContext,
    ) -> llm_worker::PreToolCallAction {
        let _left = Dropped(Arc::clone(&self.left));
        self.entered.notify_one();
        std::future::pending().await
    }
}

/// A request cancelled while an operator's hook (an approval) holds it: the hook's wait went
/// on, holding the request's arguments (and, over stdio, after its place among the requests
/// in progress was given back), and the call ran if the hook let it go. The cancellation now
/// ends the wait, and the call never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cancelled_while_a_hook_holds_it_ends_the_wait() {
    let (catalog, options, started, _dropped) = held_tools();
    let hook = NeverHook::default();
    let (entered, left) = (Arc::clone(&hook.entered), Arc::clone(&hook.left));
    let url = serve(catalog, options.pre_tool_call_hook(hook)).await;
    let client = plain_client(&url).await;
    // The client gives up on the request (its future is dropped: rmcp sends
    // `notifications/cancelled`).
    tokio::select! {
        answered = client.call_tool_once(call("held", json!({}))) => {
            panic!("the held call answered: {answered:?}");
        }
        () = entered.notified() => {}
    }
    // A liveness bound far above what it takes.
    tokio::time::timeout(Duration::from_secs(30), left.notified())
        .await
        .expect("the hook's wait ended with its request");
    assert!(
        tokio::time::timeout(Duration::ZERO, started.notified())
            .await
            .is_err(),
        "the cancelled call ran"
    );
    client.cancel().await.expect("close");
}
