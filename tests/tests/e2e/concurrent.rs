//! Contract 1.0.0: one instance serves several calls at once, sharing its state; a call that
//! runs out of time while it awaits ends alone; one that runs out of time running code ends
//! the instance, and the calls in it report the lost state.

use std::time::{Duration, Instant};

use llm_worker::task::{TaskError, TaskStatus};
use llm_worker::*;
use llm_worker_tests::http_server::TestServer;
use llm_worker_tests::{ScratchDir, host, plugin_path, scratch_dir};

/// The waiter plugin in its own directory, allowed to reach `port` on the loopback address,
/// with these `[limits]` (TOML lines).
fn waiter_dir(name: &str, port: u16, limits: &str) -> ScratchDir {
    let dir = scratch_dir(name);
    std::fs::copy(plugin_path("waiter"), dir.join("waiter.wasm")).expect("copy");
    std::fs::write(
        dir.join("waiter.policy.toml"),
        format!("[limits]\n{limits}\n\n[http]\nallow = [\"http://127.0.0.1:{port}\"]\n"),
    )
    .expect("write policy");
    dir
}

fn session(dir: &ScratchDir) -> ToolServerHandle {
    let loaded = host()
        .load(dir.join("waiter.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.contract_version(), "1.0.0");
    // What the tools declare of tasks is read from the 1.0.0 tool list.
    let support = |tool: &str| {
        loaded
            .tools()
            .iter()
            .find(|meta| meta.name == tool)
            .map(|meta| meta.task_support)
    };
    assert_eq!(support("fetch"), Some(TaskSupport::Optional));
    assert_eq!(support("bump"), Some(TaskSupport::Forbidden));
    let mut worker = Worker::new();
    worker
        .register_tools(loaded.definitions())
        .expect("registers");
    worker.tool_server_handle()
}

async fn call(
    tools: &ToolServerHandle,
    tool: &str,
    input: serde_json::Value,
) -> Result<String, ToolServerError> {
    tools.call_tool(tool, &input.to_string()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_awaits_lets_the_others_run_and_they_share_state() {
    let (server, gate) = TestServer::held("held body");
    let dir = waiter_dir("concurrent-shared", server.port(), "timeout_ms = 10000");
    let tools = session(&dir);
    let url = format!("http://127.0.0.1:{}/", server.port());
    let waiting = {
        let tools = tools.clone();
        tokio::spawn(async move { call(&tools, "fetch", serde_json::json!({ "url": url })).await })
    };
    // The fetch is in the server's hands (and has counted itself): now another call of the
    // same instance runs to its end while the first still waits.
    let started = Instant::now();
    while server.requests().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the fetch never arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("2")
    );
    assert!(
        !waiting.is_finished(),
        "the fetch ended before its response came"
    );
    gate.open();
    let fetched = waiting.await.expect("joins");
    // The fetch sees the bump made while it waited: one instance, one state.
    assert_eq!(fetched.as_deref(), Ok("2 held body"));
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("3")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_or_a_prompt_that_awaits_lets_the_instances_calls_run() {
    for (what, kind) in [("read", 0), ("prompt", 1)] {
        let (server, gate) = TestServer::held("held body");
        // Reads and renderings get HTTP only where the policy says so.
        let dir = waiter_dir(
            &format!("concurrent-{what}"),
            server.port(),
            &format!(
                "timeout_ms = 10000\n\n[resources.http]\nallow = [\"http://127.0.0.1:{port}\"]\n\n\
                 [prompts.http]\nallow = [\"http://127.0.0.1:{port}\"]",
                port = server.port()
            ),
        );
        let plugin = host()
            .load(dir.join("waiter.wasm"))
            .unwrap_or_else(|e| panic!("{e}"));
        let session = plugin.open();
        let mut worker = Worker::new();
        worker
            .register_tools(session.definitions())
            .expect("registers");
        let tools = worker.tool_server_handle();
        // The instance is running: the read or the rendering runs beside the call below.
        assert_eq!(
            call(&tools, "bump", serde_json::json!({})).await.as_deref(),
            Ok("1")
        );
        let port = server.port().to_string();
        let waiting = {
            let session = session.clone();
            tokio::spawn(async move {
                if kind == 0 {
                    let contents = session
                        .read_resource(&format!("waited://local/{port}"))
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(format!("{contents:?}"))
                } else {
                    let prompt = session
                        .get_prompt("waited_prompt", &[("port".to_owned(), port)])
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>(format!("{prompt:?}"))
                }
            })
        };
        let mut waiting = waiting;
        tokio::select! {
            () = llm_worker_tests::wait::within("the request", server.arrived()) => {}
            ended = &mut waiting => panic!("{what} ended before its request: {ended:?}"),
        }
        // Held by the server: another call of the same instance runs to its end meanwhile
        // (a read or a rendering run in place would hold the instance until its answer).
        assert_eq!(
            call(&tools, "bump", serde_json::json!({})).await.as_deref(),
            Ok("2"),
            "{what}"
        );
        assert!(
            !waiting.is_finished(),
            "{what} ended before its response came"
        );
        gate.open();
        let answer = waiting.await.expect("joins");
        assert!(
            answer.as_ref().is_ok_and(|text| text.contains("held body")),
            "{what}: {answer:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_while_it_awaits_ends_alone() {
    let (server, _never) = TestServer::held("never sent");
    let dir = waiter_dir("concurrent-timeout", server.port(), "timeout_ms = 1000");
    let tools = session(&dir);
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("1")
    );
    let url = format!("http://127.0.0.1:{}/", server.port());
    let waiting = {
        let tools = tools.clone();
        tokio::spawn(async move { call(&tools, "fetch", serde_json::json!({ "url": url })).await })
    };
    // A sibling naps and answers while the fetch waits for a response that never comes.
    assert_eq!(
        call(&tools, "nap", serde_json::json!({ "ms": 100 }))
            .await
            .as_deref(),
        Ok("2")
    );
    let timed_out = waiting.await.expect("joins");
    match &timed_out {
        Err(ToolServerError::ToolExecution(message)) => assert!(
            message.contains("ran longer than its time limit")
                && message.contains("cancelled")
                && message.contains("other calls go on"),
            "{message}"
        ),
        other => panic!("the waiting fetch should time out alone: {other:?}"),
    }
    // The instance went on: the counter kept the fetch's and the bump's counts.
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("3")
    );
}

/// A call that waited past its deadline and wakes before its caller's timer has fired (here
/// 170 ms late, its timer's end) is cancelled there and then, and ends alone: waking late is
/// not running out of time running code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_wakes_past_its_deadline_ends_alone() {
    let dir = waiter_dir("concurrent-late", 1, "timeout_ms = 500");
    let tools = session(&dir);
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("1")
    );
    let late = call(&tools, "nap", serde_json::json!({ "ms": 670 })).await;
    match &late {
        Err(ToolServerError::ToolExecution(message)) => assert!(
            message.contains("ran longer than its time limit")
                && message.contains("other calls go on"),
            "{message}"
        ),
        other => panic!("the late nap should time out alone: {other:?}"),
    }
    // The instance went on, its counter with it.
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("2")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_runs_out_of_time_running_code_ends_the_instance() {
    let (server, _never) = TestServer::held("never sent");
    let dir = waiter_dir("concurrent-spin", server.port(), "timeout_ms = 500");
    let tools = session(&dir);
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("1")
    );
    // A sibling waits on a server that never answers; once the server has its request, the
    // sibling is in the instance.
    let url = format!("http://127.0.0.1:{}/", server.port());
    let waiting = {
        let tools = tools.clone();
        tokio::spawn(async move { call(&tools, "fetch", serde_json::json!({ "url": url })).await })
    };
    let started = Instant::now();
    while server.requests().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the fetch never arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let spun = call(&tools, "spin", serde_json::json!({})).await;
    match &spun {
        Err(ToolServerError::ToolExecution(message)) => assert!(
            message.contains("ran longer than its time limit")
                && message.contains("state was lost"),
            "{message}"
        ),
        other => panic!("the spinning call should time out: {other:?}"),
    }
    match waiting.await.expect("joins") {
        Err(ToolServerError::ToolExecution(message)) => {
            assert!(message.contains("state was lost"), "{message}");
        }
        other => panic!("the sibling should report the lost instance: {other:?}"),
    }
    // A fresh instance: the counter starts again.
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_the_cap_wait_their_turn() {
    let server = TestServer::answering("unused");
    let dir = waiter_dir(
        "concurrent-cap",
        server.port(),
        "timeout_ms = 10000\nmax_concurrent_calls = 2",
    );
    let tools = session(&dir);
    let started = Instant::now();
    let naps: Vec<_> = (0..4)
        .map(|_| {
            let tools = tools.clone();
            tokio::spawn(async move { call(&tools, "nap", serde_json::json!({ "ms": 300 })).await })
        })
        .collect();
    for nap in naps {
        assert_eq!(nap.await.expect("joins").as_deref(), Ok("0"));
    }
    // Two at a time: two rounds of 300 ms, not one (all four at once) nor four.
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_runs_as_a_task_through_the_library() {
    let (server, gate) = TestServer::held("task body");
    // A call's limit of 200 ms; a task's of 10 s.
    let dir = waiter_dir(
        "concurrent-task",
        server.port(),
        "timeout_ms = 200\ntask_timeout_ms = 10000",
    );
    let tools = session(&dir);
    let url = format!("http://127.0.0.1:{}/", server.port());
    let input = serde_json::json!({ "url": url }).to_string();
    let started = tools.start_task("fetch", &input).expect("starts");
    assert_eq!(started.status, TaskStatus::Working);
    // Past a call's limit, the task still waits for its response.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let task = tools.task(&started.id).expect("known");
    assert_eq!(task.status, TaskStatus::Working);
    // Its progress before the request is its status message.
    assert_eq!(task.status_message.as_deref(), Some("fetching (1 of 2)"));
    // Meanwhile the instance serves calls: the task's fetch counted itself.
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("2")
    );
    gate.open();
    let done = tools.wait_task(&started.id).await.expect("ends");
    assert_eq!(done.status, TaskStatus::Completed);
    let output =
        std::sync::Arc::unwrap_or_clone(done.outcome.expect("an outcome")).expect("a result");
    assert_eq!(output.into_text(), "2 task body");

    // A task cancelled while it naps: cancelled, and the instance goes on with its state.
    // Cancelled at once: whether or not its call has started, it is told to stop.
    let napping = tools.start_task("nap", r#"{"ms": 60000}"#).expect("starts");
    let cancelled = tools.cancel_task(&napping.id).expect("cancels");
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("3")
    );
    assert!(matches!(
        tools.task("task-00000000000000000000000000000000"),
        Err(ToolServerError::Task(_))
    ));
    // Forgotten, a task frees its place at once (an hour's wait otherwise, 64 tasks at most).
    assert_eq!(
        tools.forget_task(&napping.id).map(|task| task.status),
        Ok(TaskStatus::Cancelled)
    );
    assert!(matches!(
        tools.task(&napping.id),
        Err(ToolServerError::Task(TaskError::NotFound(_)))
    ));
    // A tool that does not declare task support is not started as a task.
    assert_eq!(
        tools.start_task("bump", "{}").map(|task| task.id),
        Err(ToolServerError::Task(TaskError::NotATask("bump".into())))
    );
}

/// Calls `leaving` (a tool of the waiter fixture that answers at once and leaves work in the
/// instance for an hour), in an instance of one place: the next call waits for that place, and
/// is told the instance ended when the work outlived its grace; a new instance then serves the
/// session, with its own state.
async fn work_left_behind_ends_its_instance(name: &str, leaving: &str) {
    let server = TestServer::answering("unused");
    let dir = waiter_dir(
        name,
        server.port(),
        "timeout_ms = 20000\nmax_concurrent_calls = 1",
    );
    let tools = session(&dir);
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("1")
    );
    assert_eq!(
        call(&tools, leaving, serde_json::json!({ "ms": 3_600_000 }))
            .await
            .as_deref(),
        Ok("1")
    );
    match call(&tools, "nap", serde_json::json!({ "ms": 10 })).await {
        Err(ToolServerError::ToolExecution(message)) => assert!(
            message.contains("left work in the instance") && message.contains("restarted"),
            "{leaving}: {message}"
        ),
        other => panic!("{leaving}: the instance should have ended: {other:?}"),
    }
    assert_eq!(
        call(&tools, "bump", serde_json::json!({})).await.as_deref(),
        Ok("1")
    );
}

/// A call answered at once whose guest task goes on waiting for an hour's timer: a plugin could
/// otherwise leave one such task (and its stack) behind per call, without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_a_call_leaves_behind_keeps_its_place_and_must_finish_within_the_grace() {
    work_left_behind_ends_its_instance("concurrent-linger", "linger").await;
}

/// Work left behind that blocks the instance's event loop (a WASI 0.2 sleep, which suspends
/// the store without returning to the loop) cannot hold the instance's places past its grace:
/// the instance is ended from outside the loop. Without that watch, the next call waited its
/// whole time limit (20 s) for the place the blocked work held, and was refused as busy, as was
/// every call after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_left_behind_that_blocks_the_event_loop_still_ends_within_the_grace() {
    work_left_behind_ends_its_instance("concurrent-linger-blocked", "linger_blocked").await;
}

/// A response whose body breaks off (the connection closed before the length it announced)
/// was handed to the plugin as a whole, shorter body by the SDK's HTTP client: it is an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_breaks_off_is_an_error_not_a_shorter_body() {
    let server = TestServer::truncated("half of it");
    let dir = waiter_dir("concurrent-truncated", server.port(), "");
    let tools = session(&dir);
    let url = format!("http://127.0.0.1:{}/", server.port());
    let fetched = call(&tools, "fetch", serde_json::json!({ "url": url })).await;
    assert!(
        matches!(&fetched, Err(ToolServerError::ToolExecution(_))),
        "{fetched:?}"
    );
    assert_eq!(server.connections(), 1, "the request went out");
}

/// The fetch reference plugin: two fetches of one session, the first held by its server, the
/// second answered meanwhile (a fetch waiting in place held the session's instance, so the
/// second queued behind it, or failed as busy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_fetches_of_one_session_run_at_once() {
    let (held, gate) = TestServer::held("the held page");
    let quick = TestServer::answering("the quick page");
    let dir = scratch_dir("concurrent-fetch");
    std::fs::copy(plugin_path("fetch"), dir.join("fetch.wasm")).expect("copy");
    std::fs::write(
        dir.join("fetch.policy.toml"),
        format!(
            "[env.set]\nFETCH_IGNORE_ROBOTS_TXT = \"1\"\n\n[http]\nallow = [\"http://127.0.0.1:{}\", \
             \"http://127.0.0.1:{}\"]\n",
            held.port(),
            quick.port()
        ),
    )
    .expect("write policy");
    let loaded = host()
        .load(dir.join("fetch.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut worker = Worker::new();
    worker
        .register_tools(loaded.definitions())
        .expect("registers");
    let tools = worker.tool_server_handle();
    let fetch = |port: u16| serde_json::json!({ "url": format!("http://127.0.0.1:{port}/") });
    let waiting = {
        let (tools, input) = (tools.clone(), fetch(held.port()));
        tokio::spawn(async move { call(&tools, "fetch", input).await })
    };
    llm_worker_tests::wait::within("the held request", held.arrived()).await;
    let quick_page = call(&tools, "fetch", fetch(quick.port())).await;
    assert!(
        quick_page
            .as_ref()
            .is_ok_and(|page| page.contains("the quick page")),
        "{quick_page:?}"
    );
    assert!(
        !waiting.is_finished(),
        "the held fetch ended before its page came"
    );
    gate.open();
    let held_page = waiting.await.expect("joins");
    assert!(
        held_page
            .as_ref()
            .is_ok_and(|page| page.contains("the held page")),
        "{held_page:?}"
    );
}
