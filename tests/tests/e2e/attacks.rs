//! The second security round: attacks by components written by hand in the WebAssembly text
//! format (where the Rust SDK cannot express them) and by test fixtures. Each test is one
//! attack of SECURITY.md; each asserts that the attack fails and that the host keeps serving.

use std::time::Duration;

use llm_worker::*;
use llm_worker_tests::wait::within;
use llm_worker_tests::wat::{WatComponent, ret};
use llm_worker_tests::{
    error_message, greet_beside_a_slow_starter, plugin, plugin_path, scratch_dir, session,
    when_logged,
};

const OBJECT: &str = r#"{"type":"object"}"#;

/// A host whose instances get 16 MiB.
fn small_host() -> PluginHost {
    PluginHost::with_limits(Limits::default().memory_bytes(16 << 20))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A component whose `execute` runs `code` (which leaves an i32 on the stack: non-zero means
/// the attack got through) and returns "breached" or "held".
fn attack(code: &str, core_items: &str) -> Vec<u8> {
    WatComponent::new(&[("attack", "An attack.", OBJECT)])
        .output("held")
        .output("breached")
        .core_items(core_items)
        .execute(&format!(
            "(if (result i32) {code} (then (i32.const {})) (else (i32.const {})))",
            ret(1),
            ret(0)
        ))
        .build()
}

#[tokio::test]
async fn a_huge_memory64_grow_does_not_unlock_a_second_memory() {
    // Grow a 64-bit memory by 2^48 - 1 pages (its byte size wraps a careless sum), then grow
    // the 32-bit memory to 32 MiB, twice the limit.
    let bytes = attack(
        "(drop (memory.grow $big (i64.const 0xffffffffffff)))
         (i32.ne (memory.grow 0 (i32.const 512)) (i32.const -1))",
        "(memory $big i64 0)",
    );
    let plugin = small_host()
        .load_bytes("/plugins/grow64.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&plugin);
    for _ in 0..2 {
        let message = error_message(tools.call_tool("attack", "{}").await);
        assert!(
            message.contains("more memory than its limit of 16 MiB"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn two_memories_share_one_limit() {
    // 12 MiB in each of two memories: each fits the 16 MiB limit, together they do not.
    let bytes = attack(
        "(drop (memory.grow $second (i32.const 192)))
         (i32.ne (memory.grow 0 (i32.const 192)) (i32.const -1))",
        "(memory $second 0)",
    );
    let plugin = small_host()
        .load_bytes("/plugins/two-memories.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    let message = error_message(session(&plugin).call_tool("attack", "{}").await);
    assert!(message.contains("limit of 16 MiB"), "{message}");
}

fn refused_at_start(name: &str, bytes: &[u8]) -> String {
    match small_host().load_bytes(format!("/plugins/{name}.wasm"), bytes) {
        Ok(plugin) => panic!("{plugin:?} should have been refused"),
        Err(error @ PluginError::Startup { .. }) => error.to_string(),
        Err(other) => panic!("expected a start-up failure, got {other}"),
    }
}

#[test]
fn more_memories_than_toolchains_use_are_refused() {
    let message = refused_at_start(
        "memories",
        &attack("(i32.const 0)", "(memory 0) (memory 0) (memory 0)"),
    );
    assert!(message.contains("memories.wasm"), "{message}");
    assert!(message.contains("memory count"), "{message}");
    // Two memories (a program and the preview-1 adapter) are fine.
    let two = small_host().load_bytes(
        "/plugins/two.wasm",
        &attack("(i32.const 0)", "(memory $other 0)"),
    );
    assert!(two.is_ok(), "{two:?}");
}

#[test]
fn more_core_instances_than_toolchains_use_are_refused() {
    let mut bytes_text = WatComponent::new(&[("t", "d", OBJECT)]).text();
    let extra: String = (0..20)
        .map(|i| format!("(core instance $extra{i} (instantiate $tiny))\n"))
        .collect();
    bytes_text = bytes_text.replacen(
        "(core instance $i (instantiate $m))",
        &format!("(core module $tiny)\n{extra}(core instance $i (instantiate $m))"),
        1,
    );
    let bytes = wat::parse_str(&bytes_text).unwrap_or_else(|e| panic!("{e}"));
    let message = refused_at_start("instances", &bytes);
    assert!(message.contains("instance count"), "{message}");
}

#[test]
fn large_tables_count_against_the_memory_limit() {
    // One table of 2 million elements: 32 MB of host memory at 16 bytes each.
    let message = refused_at_start(
        "big-table",
        &attack("(i32.const 0)", "(table 2000000 funcref)"),
    );
    assert!(message.contains("limit of 16 MiB"), "{message}");
    // Four tables of 300,000 elements: each would fit, together they do not.
    let message = refused_at_start(
        "tables",
        &attack("(i32.const 0)", &"(table 300000 funcref)\n".repeat(4)),
    );
    assert!(message.contains("limit of 16 MiB"), "{message}");
    // Many small tables: more than toolchains use.
    let message = refused_at_start(
        "many-tables",
        &attack("(i32.const 0)", &"(table 1 funcref)\n".repeat(20)),
    );
    assert!(message.contains("table count"), "{message}");
}

#[tokio::test]
async fn growing_a_table_past_the_limit_traps_and_is_contained() {
    // A table grown at run time, by a million elements at a time.
    let bytes = attack(
        "(drop (table.grow $t (ref.null func) (i32.const 1000000)))
         (i32.ne (table.grow $t (ref.null func) (i32.const 1000000)) (i32.const -1))",
        "(table $t 0 funcref)",
    );
    let plugin = small_host()
        .load_bytes("/plugins/grow-table.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    let message = error_message(session(&plugin).call_tool("attack", "{}").await);
    assert!(message.contains("limit of 16 MiB"), "{message}");
}

#[tokio::test]
async fn growth_failures_wasmtime_reports_without_asking_do_not_lower_the_count() {
    // A growth that is allowed, then one whose size overflows: wasmtime reports the second as
    // failed without asking the limiter first. Rolling back "the last growth" there would
    // forget the first one, and the loop would grow without bound.
    // Each growth is counted at its table's real size, so the forgetting pays off across
    // tables: four tables of 11.2 MB each would hold 45 MB under a 16 MiB limit.
    let grow_then_overflow = |table: &str| {
        format!(
            "(drop (table.grow {table} (ref.null func) (i64.const 700000)))
             (drop (table.grow {table} (ref.null func) (i64.const -1)))"
        )
    };
    let tables = attack(
        &format!(
            "{} {} {} {}
             (i64.eq (table.size $d) (i64.const 700000))",
            grow_then_overflow("$a"),
            grow_then_overflow("$b"),
            grow_then_overflow("$c"),
            grow_then_overflow("$d"),
        ),
        "(table $a i64 0 funcref) (table $b i64 0 funcref)
         (table $c i64 0 funcref) (table $d i64 0 funcref)",
    );
    // The same with two memories of 12 MiB, a failing growth between them.
    let memories = attack(
        "(drop (memory.grow 0 (i32.const 192)))
         (drop (memory.grow 0 (i32.const -1)))
         (i32.ne (memory.grow $second (i32.const 192)) (i32.const -1))",
        "(memory $second 0)",
    );
    for (name, bytes) in [("tables", tables), ("memories", memories)] {
        let plugin = small_host()
            .load_bytes(format!("/plugins/{name}.wasm"), &bytes)
            .unwrap_or_else(|e| panic!("{e}"));
        let message = error_message(session(&plugin).call_tool("attack", "{}").await);
        assert!(message.contains("limit of 16 MiB"), "{name}: {message}");
    }
}

/// An echo plugin (it returns its input as it got it) whose schema allows only `"read"` as
/// `mode`, wherever a mode may appear: as a declared property, under a pattern, as any other
/// member, in array items, in a nested object, and behind a `$ref`.
fn echo() -> LoadedPlugin {
    let read_only = r#"{"enum":["read"]}"#;
    let schema = format!(
        r##"{{"type":"object",
            "properties":{{
              "mode":{read_only},
              "list":{{"type":"array","items":{{"type":"object","properties":{{"mode":{read_only}}}}}}},
              "nested":{{"type":"object","properties":{{"inner":{{"type":"object","properties":{{"mode":{read_only}}}}}}}}},
              "by_ref":{{"$ref":"#/$defs/options"}}
            }},
            "patternProperties":{{"^x-":{read_only}}},
            "additionalProperties":{{"type":"object","additionalProperties":{read_only}}},
            "$defs":{{"options":{{"type":"object","properties":{{"mode":{read_only}}}}}}}
          }}"##
    );
    let bytes = WatComponent::new(&[("echo", "Returns its input.", &schema)])
        .echo()
        .build();
    llm_worker_tests::host()
        .load_bytes("/plugins/echo.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_repeated_key_cannot_slip_a_value_past_the_schema() {
    let tools = session(&echo());
    let members: String = (0..30).map(|i| format!(r#""f{i}":{{}},"#)).collect();
    for (input, path, key) in [
        (r#"{"mode":"read","mode":"delete"}"#.to_owned(), "/", "mode"),
        (r#"{"mode":"delete","mode":"read"}"#.to_owned(), "/", "mode"),
        (
            r#"{"list":[{"mode":"read"},{"mode":"read","mode":"delete"}]}"#.to_owned(),
            "/list/1",
            "mode",
        ),
        (
            r#"{"nested":{"inner":{"mode":"read","mode":"delete"}}}"#.to_owned(),
            "/nested/inner",
            "mode",
        ),
        (
            r#"{"by_ref":{"mode":"read","mode":"delete"}}"#.to_owned(),
            "/by_ref",
            "mode",
        ),
        (
            r#"{"x-mode":"read","x-mode":"delete"}"#.to_owned(),
            "/",
            "x-mode",
        ),
        (
            r#"{"other":{"a":"read","a":"delete"}}"#.to_owned(),
            "/other",
            "a",
        ),
        // Many members: the repeat is far from the first occurrence.
        (
            format!(r#"{{"mode":"read",{members}"mode":"delete"}}"#),
            "/",
            "mode",
        ),
        // The same name spelled with escapes.
        (
            r#"{"mode":"read","\u006d\u006fde":"delete"}"#.to_owned(),
            "/",
            "mode",
        ),
        // Names equal but for case (Go's encoding/json reads them as one).
        (r#"{"mode":"read","MODE":"delete"}"#.to_owned(), "/", "MODE"),
        (
            format!(r#"{{"mode":"read",{members}"Mode":"delete"}}"#),
            "/",
            "Mode",
        ),
        // A NUL in a name (C parsers end the name there).
        (
            r#"{"mode\u0000":"delete","mode":"read"}"#.to_owned(),
            "/",
            "mode\0",
        ),
    ] {
        match tools.call_tool("echo", &input).await {
            Err(ToolServerError::ToolExecution(message)) => {
                assert!(
                    message.starts_with("Invalid argument:")
                        && message.contains(&format!("{key:?}"))
                        && message.contains(&format!("at {path};")),
                    "{input}: {message}"
                );
            }
            other => panic!("{input}: the repeated key got through: {other:?}"),
        }
    }
    // What passes the check is exactly what the plugin gets.
    let fine = r#"{"mode":"read","list":[{"mode":"read"}],"x-a":"read","other":{"b":"read"}}"#;
    assert_eq!(tools.call_tool("echo", fine).await.as_deref(), Ok(fine));
    let denied = tools.call_tool("echo", r#"{"mode":"delete"}"#).await;
    assert!(
        matches!(&denied, Err(ToolServerError::ToolExecution(m)) if m.contains("\"delete\"")),
        "{denied:?}"
    );
}

#[tokio::test]
async fn names_go_reads_as_one_cannot_slip_a_value_past_the_schema() {
    // Go's encoding/json fills a field from any member whose name folds like the field's
    // (simple case mappings): a plugin in Go reads "straẞe" as its field "straße". The schema
    // constrains "straße" only; every other name may hold anything.
    let read_only = r#"{"enum":["read"]}"#;
    let names = ["straße", "id", "kind", "mask", "ᾳ", "ᾀ"];
    let properties: Vec<String> = names
        .iter()
        .map(|name| format!(r#""{name}":{read_only}"#))
        .collect();
    let schema = format!(
        r#"{{"type":"object","properties":{{{}}}}}"#,
        properties.join(",")
    );
    let bytes = WatComponent::new(&[("echo", "Returns its input.", &schema)])
        .echo()
        .build();
    let plugin = llm_worker_tests::host()
        .load_bytes("/plugins/go-echo.wasm", &bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&plugin);
    let members: String = (0..30).map(|i| format!(r#""f{i}":0,"#)).collect();
    for (name, variant) in [
        ("straße", "straẞe"),    // ẞ lowercases to ß; ß has no simple uppercase
        ("id", "İd"),            // İ lowercases simply to i
        ("kind", "\u{212a}ind"), // the Kelvin sign lowercases to k
        ("mask", "ma\u{17f}k"),  // long s uppercases to S
        ("ᾳ", "ᾼ"),              // ypogegrammeni: ᾳ uppercases simply to ᾼ
        ("ᾀ", "ᾈ"),
    ] {
        for input in [
            format!(r#"{{"{name}":"read","{variant}":"delete"}}"#),
            format!(r#"{{"{variant}":"delete",{members}"{name}":"read"}}"#),
        ] {
            match tools.call_tool("echo", &input).await {
                Err(ToolServerError::ToolExecution(message)) => assert!(
                    message.starts_with("Invalid argument:")
                        && message.contains("differ only in case")
                        && message.contains(&format!("{variant:?}")),
                    "{input}: {message}"
                ),
                other => panic!("{input}: the variant got through: {other:?}"),
            }
        }
    }
    // Names no folding joins pass, byte for byte.
    let fine = r#"{"straße":"read","straße2":"delete","id":"read","ıx":"delete"}"#;
    assert_eq!(tools.call_tool("echo", fine).await.as_deref(), Ok(fine));
}

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
        .load(plugin_path("counter"))
        .unwrap_or_else(|e| panic!("{e}"));
    let first = session(&counter);
    assert_eq!(first.call_tool("count", "{}").await.as_deref(), Ok("0"));
    let second = session(&counter);
    for _ in 0..4 {
        let message = error_message(second.call_tool("count", "{}").await);
        assert!(
            message.contains("pool of instance slots is full"),
            "{message}"
        );
    }
    drop(first);
    // Not disabled: the pool's capacity is the host's limit, not the plugin's failure.
    assert_eq!(second.call_tool("count", "{}").await.as_deref(), Ok("0"));
}

#[tokio::test]
async fn a_call_dropped_by_its_caller_leaves_no_half_run_instance() {
    let host = PluginHost::with_limits(Limits::default().max_consecutive_failures(1))
        .unwrap_or_else(|e| panic!("{e}"));
    let trapper = host
        .load(plugin_path("trapper"))
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&trapper);
    assert_eq!(tools.call_tool("tick", "{}").await.as_deref(), Ok("0"));
    assert_eq!(tools.call_tool("tick", "{}").await.as_deref(), Ok("1"));
    // The caller gives up once the loop runs (it says so as it begins).
    let (sink, spinning) = when_logged("spinning forever");
    tokio::select! {
        ended = with_tool_events(sink, tools.call_tool("spin_forever", "{}")) => {
            panic!("an endless loop ended: {ended:?}")
        }
        () = within("the endless loop to start", spinning.notified()) => {}
    }
    // The next call says what was lost; it is not a failure of the plugin (one failure would
    // disable it here), and the instance after it starts afresh.
    let message = error_message(tools.call_tool("tick", "{}").await);
    assert!(
        message.contains("'spin_forever'")
            && message.contains("abandoned by its caller")
            && message.contains("state was lost"),
        "{message}"
    );
    assert_eq!(tools.call_tool("tick", "{}").await.as_deref(), Ok("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_queued_behind_a_busy_instance_waits_at_most_its_time_limit() {
    let host = PluginHost::with_limits(Limits::default().call_timeout(Duration::from_millis(500)))
        .unwrap_or_else(|e| panic!("{e}"));
    let sleeper = host
        .load(plugin_path("sleeper"))
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
    let host = PluginHost::with_limits(
        Limits::default()
            .call_timeout(Duration::from_millis(600))
            .max_consecutive_failures(1),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let sleeper = host
        .load(plugin_path("sleeper"))
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&sleeper);
    // The first call holds the instance for 400 ms; the second, sent once the first holds
    // it, gets it with at most 200 ms left and needs 450.
    let (sink, spinning) = when_logged("spinning");
    let (first, second) = tokio::join!(
        with_tool_events(sink, tools.call_tool("spin", r#"{"ms":400}"#)),
        async {
            within("the first call to start spinning", spinning.notified()).await;
            tools.call_tool("spin", r#"{"ms":450}"#).await
        }
    );
    assert!(first.is_ok(), "{first:?}");
    let second = error_message(second);
    assert!(
        second.contains("time limit of 600ms") && second.contains("waiting for other calls"),
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

#[test]
fn oversized_tool_lists_are_refused() {
    let long = "d".repeat(20_000);
    let error = llm_worker_tests::host()
        .load_bytes(
            "/plugins/verbose.wasm",
            &WatComponent::new(&[("verbose", &long, OBJECT)]).build(),
        )
        .expect_err("refused");
    assert!(
        matches!(error, PluginError::ToolListTooLarge { .. })
            && error
                .to_string()
                .contains("description of tool \"verbose\""),
        "{error}"
    );
}

/// An input schema of `count` distinct regular expressions (numbered from `first`), as
/// `patternProperties` keys, each wide enough to compile into some 20 KB: 2,000 of them make
/// 36 KB of schema.
fn patterns_schema(first: usize, count: usize) -> String {
    let patterns: Vec<String> = (first..first + count)
        .map(|i| format!(r#""^\\S+{i}.*$":{{}}"#))
        .collect();
    format!(
        r#"{{"type":"object","patternProperties":{{{}}}}}"#,
        patterns.join(",")
    )
}

#[test]
fn compiled_schemas_are_held_to_a_host_memory_budget() {
    // 64 tools of 2,000 distinct patterns each: 4 GiB of host memory once compiled.
    let names: Vec<String> = (0..64).map(|i| format!("t{i}")).collect();
    let schemas: Vec<String> = (0..64).map(|i| patterns_schema(i * 2_000, 2_000)).collect();
    let tools: Vec<(&str, &str, &str)> = names
        .iter()
        .zip(&schemas)
        .map(|(name, schema)| (name.as_str(), "Patterns.", schema.as_str()))
        .collect();
    let error = llm_worker_tests::host()
        .load_bytes("/plugins/patterns.wasm", &WatComponent::new(&tools).build())
        .expect_err("over the budget");
    let message = error.to_string();
    assert!(
        matches!(error, PluginError::ToolListTooLarge { .. })
            && message.contains("/plugins/patterns.wasm")
            && message.contains("the input schema of tool \"t")
            && message.contains("limit of 256 MiB")
            && message.contains("`schema_memory_mib` under [limits]"),
        "{message}"
    );
    // The same in output schemas.
    let metas: Vec<_> = schemas
        .iter()
        .map(|schema| llm_worker_tests::wat::MetaV2 {
            output_schema: Some(schema.clone()),
            ..Default::default()
        })
        .collect();
    let outputs: Vec<(&str, &str, &str)> = names
        .iter()
        .map(|name| (name.as_str(), "Patterns.", OBJECT))
        .collect();
    let error = llm_worker_tests::host()
        .load_bytes(
            "/plugins/outputs.wasm",
            &WatComponent::new(&outputs).v2(metas).build(),
        )
        .expect_err("over the budget");
    let message = error.to_string();
    assert!(
        matches!(error, PluginError::ToolListTooLarge { .. })
            && message.contains("the output schema of tool \"t"),
        "{message}"
    );
    // A moderate number of patterns loads and checks its inputs.
    let few = WatComponent::new(&[("few", "Patterns.", &patterns_schema(0, 50))])
        .echo()
        .build();
    let plugin = llm_worker_tests::host()
        .load_bytes("/plugins/few.wasm", &few)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(plugin.check_input("few", r#"{"a7x":1}"#).is_ok());
    // Over a host's budget (8 MiB here), a plugin loads once its policy raises its own.
    let host = PluginHost::with_limits(Limits::default().schema_memory_bytes(8 << 20))
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = scratch_dir("schema-memory");
    let path = dir.join("many.wasm");
    let many = WatComponent::new(&[("many", "Patterns.", &patterns_schema(0, 2_000))]).build();
    std::fs::write(&path, many).expect("write");
    let error = host.load(&path).expect_err("over 8 MiB");
    assert!(error.to_string().contains("limit of 8 MiB"), "{error}");
    std::fs::write(
        dir.join("many.policy.toml"),
        "[limits]\nschema_memory_mib = 512\n",
    )
    .expect("policy");
    let plugin = host.load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plugin.policy().limits.schema_memory_bytes, 512 << 20);
}

#[tokio::test]
async fn http_is_not_linked_for_plugins_without_http_grants() {
    let error = llm_worker_tests::host()
        .load(plugin_path("fetcher"))
        .expect_err("refused without a grant");
    let message = error.to_string();
    assert!(
        matches!(error, PluginError::UnsupportedImport { .. })
            && message.contains("wasi:http")
            && message.contains("[http] allow")
            && message.contains("fetcher.policy.toml"),
        "{message}"
    );
    // The plugins without HTTP still load and run.
    let counter = session(&plugin("counter"));
    assert_eq!(counter.call_tool("count", "{}").await.as_deref(), Ok("0"));
}

#[test]
fn the_size_cap_applies_to_bytes_too() {
    let host = PluginHost::builder()
        .max_plugin_bytes(1000)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let bytes = WatComponent::new(&[("t", "d", OBJECT)]).build();
    assert!(bytes.len() > 1000);
    for loaded in [
        host.load_bytes("/plugins/big.wasm", &bytes),
        host.load(plugin_path("greet")),
        host.load_with_policy(plugin_path("greet"), SandboxPolicy::default()),
    ] {
        match loaded {
            Err(error @ PluginError::TooLarge { .. }) => {
                assert!(
                    error.to_string().contains("over the limit of 1000 bytes"),
                    "{error}"
                )
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }
}

/// A FIFO named like a plugin or a policy would block a loader that opens it: refused at once.
#[cfg(unix)]
#[test]
fn special_files_are_refused_without_blocking() {
    let dir = scratch_dir("fifo");
    std::fs::copy(plugin_path("greet"), dir.join("greet.wasm")).expect("copy");
    std::fs::copy(plugin_path("counter"), dir.join("counter.wasm")).expect("copy");
    for fifo in ["evil.wasm", "counter.policy.toml"] {
        let made = std::process::Command::new("mkfifo")
            .arg(dir.join(fifo))
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
    }
    let loaded = llm_worker_tests::host()
        .load_dir(&dir)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.plugins.len(), 1, "{:?}", loaded.failures);
    assert_eq!(loaded.plugins[0].name(), "greet");
    let messages: Vec<String> = loaded.failures.iter().map(ToString::to_string).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("evil.wasm") && m.contains("not a regular file")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("counter.policy.toml") && m.contains("not a regular file")),
        "{messages:?}"
    );
    let device = llm_worker_tests::host().load("/dev/zero");
    assert!(
        matches!(device, Err(PluginError::NotAFile { .. })),
        "{device:?}"
    );
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
