//! Attacks on the memory limit: linear memories and tables, grown at run time or declared
//! large, many or overflowing, and more core instances than toolchains use.

use llm_worker::*;
use llm_worker_tests::wat::{WatComponent, ret};
use llm_worker_tests::{error_message, session};

use super::OBJECT;

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
    // Counted before compiling, as nested instances are (`attacks::load`).
    let error = small_host()
        .load_bytes("/plugins/instances.wasm", &bytes)
        .expect_err("refused");
    assert!(
        matches!(error, PluginError::Invalid { .. })
            && error.to_string().contains("21 core instances")
            && error.to_string().contains("instance count of 16"),
        "{error}"
    );
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

/// A component whose `execute` makes `count` handles of its own resource (`resource.new`,
/// no host code in the loop) and returns "made".
fn handles(count: u32) -> Vec<u8> {
    WatComponent::new(&[("handles", "Makes handles.", OBJECT)])
        .output("made")
        .own_resource()
        .execute(&format!(
            "(local $made i32)
             (block $done (loop $more
               (br_if $done (i32.ge_u (local.get $made) (i32.const {count})))
               (drop (call $resource-new (local.get $made)))
               (local.set $made (i32.add (local.get $made) (i32.const 1)))
               (br $more)))
             (i32.const {})",
            ret(0)
        ))
        .build()
}

#[tokio::test]
async fn handles_a_plugin_makes_itself_are_capped_per_instance() {
    // Each handle takes host memory the memory limit does not see; wasmtime allows 100,000
    // per store, the host 4,096.
    let plugin = llm_worker_tests::host()
        .load_bytes("/plugins/handles.wasm", &handles(20_000))
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&plugin);
    let message = error_message(tools.call_tool("handles", "{}").await);
    assert!(
        message.contains("plugin 'handles'") && message.contains("handle limit exceeded"),
        "{message}"
    );
    // Contained: the next call gets a fresh instance; a thousand handles are fine.
    let plugin = llm_worker_tests::host()
        .load_bytes("/plugins/few-handles.wasm", &handles(1_000))
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&plugin);
    for _ in 0..2 {
        assert_eq!(
            tools.call_tool("handles", "{}").await.ok().as_deref(),
            Some("made")
        );
    }
}
