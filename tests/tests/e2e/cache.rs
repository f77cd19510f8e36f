//! The compiled cache: a second load deserializes instead of compiling; damaged entries are
//! recompiled, never trusted; an unusable cache directory only costs speed.

use std::path::{Path, PathBuf};

use llm_worker::*;
use llm_worker_tests::{plugin_path, scratch_dir};

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
}

fn cached_host(dir: &Path) -> PluginHost {
    PluginHost::with_options(Limits::default(), Some(dir.to_owned()))
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn greets(plugin: &LoadedPlugin) {
    let mut worker = Worker::new();
    worker
        .register_tools(plugin.definitions())
        .expect("registers");
    assert_eq!(
        worker
            .tool_server_handle()
            .call_tool("greet", r#"{"name":"cache"}"#)
            .await
            .as_deref(),
        Ok("\"Hello, cache!\"")
    );
}

#[tokio::test]
async fn a_second_load_uses_the_cache() {
    let dir = scratch_dir("cache-hit");
    let first = cached_host(&dir)
        .load(plugin_path("greet"))
        .unwrap_or_else(|e| panic!("{e}"));
    let after_first = entries(&dir);
    assert_eq!(
        after_first.len(),
        1,
        "one entry per component: {after_first:?}"
    );
    let written = std::fs::metadata(&after_first[0])
        .and_then(|m| m.modified())
        .expect("mtime");
    greets(&first).await;

    // A new host (a new process, as far as the cache can tell) finds the entry.
    let second = cached_host(&dir)
        .load(plugin_path("greet"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(entries(&dir), after_first, "nothing new was written");
    let still = std::fs::metadata(&after_first[0])
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(written, still, "the entry was read, not rewritten");
    greets(&second).await;

    cached_host(&dir)
        .load(plugin_path("counter"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(entries(&dir).len(), 2, "another component, another entry");
}

#[tokio::test]
async fn a_damaged_entry_is_recompiled() {
    let dir = scratch_dir("cache-damaged");
    cached_host(&dir)
        .load(plugin_path("greet"))
        .unwrap_or_else(|e| panic!("{e}"));
    let entry = entries(&dir).remove(0);
    let mut bytes = std::fs::read(&entry).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entry, &bytes).expect("damage");

    let plugin = cached_host(&dir)
        .load(plugin_path("greet"))
        .unwrap_or_else(|e| panic!("{e}"));
    greets(&plugin).await;
    assert_ne!(
        std::fs::read(&entry).expect("read"),
        bytes,
        "the entry was rewritten"
    );

    std::fs::write(&entry, b"garbage").expect("truncate");
    let plugin = cached_host(&dir)
        .load(plugin_path("greet"))
        .unwrap_or_else(|e| panic!("{e}"));
    greets(&plugin).await;
}

#[tokio::test]
async fn an_unusable_cache_directory_only_costs_speed() {
    let dir = scratch_dir("cache-unusable");
    let not_a_dir = dir.join("file");
    std::fs::write(&not_a_dir, b"x").expect("write");
    let plugin = cached_host(&not_a_dir)
        .load(plugin_path("greet"))
        .unwrap_or_else(|e| panic!("{e}"));
    greets(&plugin).await;
}
