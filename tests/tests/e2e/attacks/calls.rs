//! Attacks through calls: starts that hang or are slow, a full instance pool, calls dropped or
//! queued behind a busy instance, and error texts past the output cap.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use llm_worker::events::with_tool_events;
use llm_worker::*;
use llm_worker_tests::wait::within;
use llm_worker_tests::wat::{WatComponent, ret};
use llm_worker_tests::{
    error_message, greet_beside_a_slow_starter, held_sleeper, plugin_path, plugin_v03_path,
    scratch_dir, session, when_logged,
};

use super::OBJECT;

#[tokio::test]
async fn a_plugin_whose_start_hangs_is_started_once_per_session() {
    let dir = scratch_dir("slowstart");
    std::fs::copy(plugin_path("slowstart"), dir.join("slow.wasm")).expect("copy");
    std::fs::create_dir(dir.join("control")).expect("mkdir");
    std::fs::write(
        dir.join("slow.policy.toml"),
        "[limits]\ntimeout_ms = 300\nmax_consecutive_failures = 2\n\
         [[dirs]]\nhost = \"control\"\nguest = \"/control\"\n",
    )
    .expect("policy");
    let plugin = llm_worker_tests::host()
        .load(dir.join("slow.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plugin.tools().len(), 5);

    // From now on, the plugin's initialisation hangs until its time limit.
    std::fs::write(dir.join("control/hang"), "").expect("hang");
    // Registering five tools starts one instance, once; the plugin's own initialisation
    // runs at the first call, within that call's limit.
    let tools = session(&plugin);
    let message = error_message(tools.call_tool("one", "{}").await);
    assert!(message.contains("time limit of 300ms"), "{message}");
    std::fs::remove_file(dir.join("control/hang")).expect("unhang");

    // One failure was counted (of the two allowed): the next call starts afresh and runs.
    assert_eq!(tools.call_tool("three", "{}").await.as_deref(), Ok("0"));
    assert_eq!(tools.call_tool("five", "{}").await.as_deref(), Ok("1"));
}

#[tokio::test]
async fn a_full_pool_is_not_counted_against_the_plugin() {
    let host = PluginHost::builder()
        .limits(Limits::default().max_consecutive_failures(2))
        .instance_pool(1)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let counter = host
        .load(plugin_v03_path("counter"))
        .unwrap_or_else(|e| panic!("{e}"));
    let first = session(&counter);
    assert_eq!(first.call_tool("count", "{}").await.as_deref(), Ok("0"));
    let second = session(&counter);
    for _ in 0..4 {
        let message = error_message(second.call_tool("count", "{}").await);
        assert!(
            message.contains("pool") && message.contains("full"),
            "{message}"
        );
    }
    drop(first);
    // Not disabled: the pool's capacity is the host's limit, not the plugin's failure.
    assert_eq!(second.call_tool("count", "{}").await.as_deref(), Ok("0"));
}

/// Calls the trapper's `spin_forever` and gives up on it once its loop runs (it says so as it
/// begins).
async fn give_up_once_spinning(tools: &ToolServerHandle) {
    let (sink, spinning) = when_logged("spinning forever");
    tokio::select! {
        ended = with_tool_events(sink, tools.call_tool("spin_forever", "{}")) => {
            panic!("an endless loop ended: {ended:?}")
        }
        () = within("the endless loop to start", spinning.notified()) => {}
    }
}

#[tokio::test]
async fn a_call_dropped_by_its_caller_leaves_no_half_run_instance() {
    let host = PluginHost::with_limits(Limits::default().max_consecutive_failures(1))
        .unwrap_or_else(|e| panic!("{e}"));
    let trapper = host
        .load(plugin_v03_path("trapper"))
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&trapper);
    assert_eq!(tools.call_tool("tick", "{}").await.as_deref(), Ok("0"));
    assert_eq!(tools.call_tool("tick", "{}").await.as_deref(), Ok("1"));
    give_up_once_spinning(&tools).await;
    // The next call says what was lost; it is not a failure of the plugin (one failure would
    // disable it here), and the instance after it starts afresh.
    let message = error_message(tools.call_tool("tick", "{}").await);
    assert!(
        message.contains("'spin_forever'")
            && message.contains("abandoned")
            && message.contains("state was lost"),
        "{message}"
    );
    assert_eq!(tools.call_tool("tick", "{}").await.as_deref(), Ok("0"));
}

/// The same on contract 1.0.0, for a call that will not return: dropped by its caller while it
/// computes without awaiting, it is ended with its instance after a grace, and the session's
/// next call says the state was lost. That was counted as the plugin's failure (here, one
/// disables it): a user pressing "stop" twice on a slow tool took the plugin out of the
/// session. It is not the plugin's failure, as a dropped call of contract 0.3.0 is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_that_will_not_return_is_not_the_plugins_failure() {
    let host = PluginHost::with_limits(Limits::default().max_consecutive_failures(1))
        .unwrap_or_else(|e| panic!("{e}"));
    let trapper = host
        .load(plugin_path("trapper"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(trapper.contract_version(), "1.0.0");
    let tools = session(&trapper);
    assert_eq!(tools.call_tool("tick", "{}").await.as_deref(), Ok("0"));
    for _ in 0..2 {
        give_up_once_spinning(&tools).await;
        // The next call waits behind the loop until the instance is ended, and says so.
        let message = error_message(tools.call_tool("tick", "{}").await);
        assert!(message.contains("lost"), "{message}");
        assert!(!message.contains("disabled"), "{message}");
        assert_eq!(tools.call_tool("tick", "{}").await.as_deref(), Ok("0"));
    }
}

/// The same through a `Worker`: a batch of tool calls dropped by its caller (a timeout, a
/// user's stop) ended none of its calls, each spawned on the runtime: they kept running, asking
/// and reporting until their time limits. They end with the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_dropped_by_its_caller_ends_its_calls() {
    let trapper = llm_worker_tests::host()
        .load(plugin_v03_path("trapper"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut worker = Worker::new();
    worker
        .register_tools(trapper.definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    let (sink, spinning) = when_logged("spinning forever");
    worker.add_tool_event_hook(move |event| sink(event.clone()));
    let call = |name: &str| {
        vec![ToolCall {
            id: "1".into(),
            name: name.into(),
            input: serde_json::json!({}),
        }]
    };
    let text = |results: Result<Vec<ToolResult>, WorkerError>| {
        let mut results = results.unwrap_or_else(|e| panic!("{e}"));
        results.remove(0).content
    };
    assert_eq!(text(worker.execute_tool_calls(call("tick")).await), "0");
    tokio::select! {
        ended = worker.execute_tool_calls(call("spin_forever")) => {
            panic!("an endless loop ended: {ended:?}")
        }
        () = within("the endless loop to start", spinning.notified()) => {}
    }
    // The next call finds the instance reset at once (not busy until the loop's time limit).
    let message = text(worker.execute_tool_calls(call("tick")).await);
    assert!(
        message.contains("'spin_forever'") && message.contains("abandoned"),
        "{message}"
    );
    assert_eq!(text(worker.execute_tool_calls(call("tick")).await), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_queued_behind_a_busy_instance_waits_at_most_its_time_limit() {
    let host = PluginHost::with_limits(Limits::default().call_timeout(Duration::from_millis(500)))
        .unwrap_or_else(|e| panic!("{e}"));
    let sleeper = host
        .load(plugin_v03_path("sleeper"))
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&sleeper);
    // The first call sleeps in a host call: it ends at its limit plus the grace for host
    // calls; the second, sent once the first holds the instance, gives up at its own limit.
    let (sink, sleeping) = when_logged("sleeping");
    let (slow, queued) = tokio::join!(
        with_tool_events(sink, tools.call_tool("sleep", r#"{"ms":100000}"#)),
        async {
            within("the first call to start sleeping", sleeping.notified()).await;
            tools.call_tool("spin", r#"{"ms":1}"#).await
        }
    );
    let slow = error_message(slow);
    assert!(slow.contains("time limit of 500ms"), "{slow}");
    let queued = error_message(queued);
    assert!(
        queued.contains("'spin'") && queued.contains("is busy"),
        "{queued}"
    );
    let after = tools.call_tool("spin", r#"{"ms":1}"#).await;
    assert!(after.is_ok(), "{after:?}");
}

/// Overlapping calls must not be a way to disable a slow plugin: a call that waited behind
/// another and then ran out of time is not counted as the plugin's failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_timed_out_after_waiting_is_not_the_plugins_failure() {
    let limits = Limits::default()
        .call_timeout(Duration::from_secs(3))
        .max_consecutive_failures(1);
    let (sleeper, release) = held_sleeper("timed-out-after-waiting", limits);
    let tools = session(&sleeper);
    // The first call holds the instance until the test releases it; the second is queued
    // behind it, then sleeps past its time limit: it runs out of time after waiting.
    let (sink, holding) = when_logged("holding");
    let first = tokio::spawn(with_tool_events(sink, {
        let tools = tools.clone();
        async move { tools.call_tool("hold", r#"{"busy":false}"#).await }
    }));
    within("the first call to hold the instance", holding.notified()).await;
    let mut second = std::pin::pin!(tools.call_tool("sleep", r#"{"ms":100000000}"#));
    // Polled once, it waits for the instance (nothing before that queue waits).
    let polled = std::future::poll_fn(|cx| Poll::Ready(second.as_mut().poll(cx))).await;
    assert!(polled.is_pending(), "not queued: {polled:?}");
    release.release();
    let first = within("the held call to return", first).await;
    assert_eq!(first.expect("joined").as_deref(), Ok("released"));
    let second = error_message(within("the queued call to end", second).await);
    assert!(
        second.contains("time limit of 3s") && second.contains("waiting for other calls"),
        "{second}"
    );
    let after = tools.call_tool("spin", r#"{"ms":1}"#).await;
    assert!(after.is_ok(), "not disabled: {after:?}");
}

#[tokio::test]
async fn error_texts_are_capped_like_outputs() {
    // An `execute` that returns `Err(execution-failed(…))` of 40,000 bytes of its memory.
    let bytes = WatComponent::new(&[("shout", "d", OBJECT)])
        .execute(&format!(
            "(i32.store8 (i32.const {at}) (i32.const 1))
             (i32.store8 (i32.const {tag}) (i32.const 1))
             (i32.store (i32.const {ptr}) (i32.const 16384))
             (i32.store (i32.const {len}) (i32.const 40000))
             (i32.const {at})",
            at = ret(0),
            tag = ret(0) + 4,
            ptr = ret(0) + 8,
            len = ret(0) + 12,
        ))
        .build();
    let host = PluginHost::with_limits(Limits::default().max_output_bytes(1000))
        .unwrap_or_else(|e| panic!("{e}"));
    let plugin = host
        .load_bytes("/plugins/shout.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    let message = error_message(session(&plugin).call_tool("shout", "{}").await);
    assert!(message.len() < 1200, "{} bytes", message.len());
    assert!(message.contains("was 40000 bytes"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_start_is_slow_delays_no_other_plugin() {
    // The slow plugin's start would spin for two minutes: registering a session and calling
    // greet must not wait for it (the factory starts the instance in the background).
    let (loaded, _dir) = greet_beside_a_slow_starter("slow-start-others", 120_000);
    let session = tokio::spawn(async move {
        let mut worker = Worker::new();
        worker
            .register_tools(loaded.definitions())
            .unwrap_or_else(|e| panic!("{e}"));
        let tools = worker.tool_server_handle();
        let greeting = tools.call_tool("greet", r#"{"name":"Ada"}"#).await;
        (greeting, worker)
    });
    // A liveness bound, a hundred times what the greeting takes: the old factory blocked here
    // for the slow plugin's whole start.
    let (greeting, worker) = tokio::time::timeout(Duration::from_secs(60), session)
        .await
        .expect("the session opened and greet answered while the other plugin was starting")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(greeting.is_ok_and(|text| text.contains("Ada")));
    // Ending the session stops the start still running (the next test's CPU is its own).
    drop(worker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_call_of_a_slow_starter_waits_within_its_own_time_limit() {
    let (loaded, _dir) = greet_beside_a_slow_starter("slow-start-first-call", 1_000);
    let mut worker = Worker::new();
    worker
        .register_tools(loaded.definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = worker.tool_server_handle();
    // Started at registration, in the background: the call waits for that start, which runs
    // out of its time limit; then the call itself tries once more, within what is left.
    let message = error_message(tools.call_tool("slow", "{}").await);
    assert!(
        message.contains("plugin 'slow'")
            && (message.contains("still starting") || message.contains("time limit of 1s")),
        "{message}"
    );
    assert_eq!(
        tools
            .call_tool("greet", r#"{"name":"Bo"}"#)
            .await
            .as_deref(),
        Ok("Hello, Bo!")
    );
}

/// A structured value within the output limit whose parsed form takes a hundred times as much
/// of the host's memory (140,000 empty objects: 1 MB of text, about 90 MB parsed), outside the
/// plugin's memory limit, for as long as the result is held: refused, naming the tool; an
/// ordinary value of the same size passes.
#[tokio::test]
async fn a_structured_value_is_weighed_once_parsed() {
    // Room in the plugin for its own parse of what it returns.
    let host = PluginHost::with_limits(
        Limits::default()
            .max_input_bytes(8 << 20)
            .memory_bytes(1 << 30),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let forger = host
        .load(llm_worker_tests::plugin_path("forger"))
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&forger);
    let call =
        |value: serde_json::Value| serde_json::json!({"json": value.to_string()}).to_string();
    let many = serde_json::json!({"a": vec![serde_json::json!({"": 0}); 140_000]});
    let message = error_message(tools.call_tool("structured", &call(many)).await);
    assert!(
        message.contains("tool 'structured' of plugin 'forger'")
            && message.contains("once parsed")
            && message.contains("fewer, larger ones"),
        "{message}"
    );
    let ordinary = serde_json::json!({"text": "x".repeat(900_000)});
    let answer = tools
        .call_tool("structured", &call(ordinary))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(answer.len() > 900_000);
}

/// The attack: a tool's result whose MIME types (of an image, audio, embedded contents, a link)
/// carry a terminal's escape sequence, a line break or a parameter-looking payload: clients
/// show them and put them where a MIME type goes, as they are. Checked as a listed resource's
/// MIME type is at load: the result is the plugin's internal error, naming the tool; an
/// ordinary MIME type passes.
#[tokio::test]
async fn content_of_a_mime_type_no_listing_could_have_is_refused() {
    let forger = llm_worker_tests::host()
        .load(llm_worker_tests::plugin_path("forger"))
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&forger);
    for mime in [
        "image/png\u{1b}]8;;https://evil\u{7}",
        "image/png\nX-Injected: 1",
        "",
        "png",
    ] {
        for kind in ["image", "audio", "resource", "link"] {
            let input = serde_json::json!({"mime": mime, "kind": kind}).to_string();
            let message = error_message(tools.call_tool("media", &input).await);
            assert!(
                message.contains("tool 'media' of plugin 'forger' broke its own contract")
                    && message.contains("MIME type"),
                "{mime:?} {kind}: {message}"
            );
        }
    }
    for kind in ["image", "audio", "resource", "link"] {
        let fine = serde_json::json!({"mime": "image/png", "kind": kind}).to_string();
        let answer = tools.call_tool("media", &fine).await;
        assert!(answer.is_ok(), "{kind}: {answer:?}");
    }
}

/// A session of a fresh forger (its own instance: the counts it keeps are this test's) and
/// the tools it registered in a `Worker`.
fn forger_session() -> (PluginSession, ToolServerHandle) {
    let forger = llm_worker_tests::host()
        .load(plugin_path("forger"))
        .unwrap_or_else(|e| panic!("{e}"));
    let plugin = forger.open();
    let mut worker = Worker::new();
    worker
        .register_tools(plugin.definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    (plugin, worker.tool_server_handle())
}

/// How many times the forger's resource list was read (its tool `lists_read`).
async fn lists_read(tools: &ToolServerHandle) -> u32 {
    let read = tools.call_tool("lists_read", "{}").await;
    read.unwrap_or_else(|e| panic!("{e}"))
        .parse::<u32>()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The attack: a contract 1.0.0 call its caller gave up on is stopped (`host.cancelled`) and
/// has a grace to return; code it runs meanwhile (here a guard's drop) says the plugin's
/// resource list changed. Taken as a change, the session would read the list again, running
/// the plugin's code, at every later list request it lets through. Ignored, as the call's
/// other reports are: the list is not read again. A call that ends as it should is heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_its_caller_gave_up_on_cannot_say_the_lists_changed() {
    let (plugin, tools) = forger_session();
    plugin.resources().await;
    let before = lists_read(&tools).await;

    // A call that returns and says the list changed is heard: the list is read again.
    tools
        .call_tool("churn", r#"{"ms": 0}"#)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    plugin.resources().await;
    let heard = lists_read(&tools).await;
    assert_eq!(heard, before + 1);

    // A call given up on by its caller says so as it is stopped: not heard.
    let (sink, waiting) = when_logged("waiting to be given up");
    {
        let call = with_tool_events(sink, tools.call_tool("change_when_given_up", "{}"));
        tokio::pin!(call);
        tokio::select! {
            () = waiting.notified() => {}
            result = &mut call => panic!("the call ended on its own: {result:?}"),
        }
    }
    // Returns once the stopped call's guard was dropped, having said the list changed.
    let given_up = tools.call_tool("given_up", "{}").await;
    assert_eq!(given_up.as_deref(), Ok("given up"));
    plugin.resources().await;
    plugin.resources().await;
    assert_eq!(lists_read(&tools).await, heard);
}

/// The attack: a contract 1.0.0 call that goes on running (a task, a call awaiting timers)
/// says the plugin's resource list changed again after each read of it. Each list request of
/// the session then ran the plugin's code to read the list again, for as long as the call
/// ran. Now a call's first saying so is heard at once, and its saying so again once more
/// when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_saying_the_lists_changed_again_and_again_has_them_read_once_more_at_its_end() {
    let (plugin, tools) = forger_session();
    plugin.resources().await;
    let before = lists_read(&tools).await;

    let (said, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let sink = move |event: llm_worker::events::ToolEvent| {
        if let llm_worker::events::ToolEventKind::Log { message, .. } = &event.kind {
            let _ = said.send(message.clone());
        }
    };
    let changing = tokio::spawn({
        let tools = tools.clone();
        with_tool_events(sink, async move {
            tools
                .call_tool("change_at_each_read", r#"{"times": 2}"#)
                .await
        })
    });
    let mut next_said = async || {
        let message = within("the call's next log", heard.recv()).await;
        message.unwrap_or_else(|| panic!("the call ended early"))
    };
    // Said once: read again.
    assert!(next_said().await.contains("said it changed 1"));
    plugin.resources().await;
    assert_eq!(lists_read(&tools).await, before + 1);
    // Said again after that read: not read again while the call runs.
    assert!(next_said().await.contains("said it changed 2"));
    plugin.resources().await;
    plugin.resources().await;
    assert_eq!(lists_read(&tools).await, before + 1);
    // Once the call ended, read once more.
    assert_eq!(
        tools.call_tool("release", "{}").await.as_deref(),
        Ok("released")
    );
    let ended = within("the call's end", changing).await;
    assert_eq!(
        ended
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .as_deref(),
        Ok("said it changed 2 times")
    );
    plugin.resources().await;
    plugin.resources().await;
    assert_eq!(lists_read(&tools).await, before + 2);
}
