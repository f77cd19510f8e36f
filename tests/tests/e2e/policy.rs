//! Policy files beside plugins: limits and grants (environment variables, directories), and
//! clear errors for bad policies.

use std::path::Path;

use llm_worker::*;
use llm_worker_tests::{ScratchDir, host, plugin_path, scratch_dir};
use serde_json::json;

/// A plugin directory holding the hostile plugin as `files.wasm` with `policy` beside it, a
/// `data/` directory with `hello.txt`, and a secret file outside `data/`.
fn plugin_dir(name: &str, policy: &str) -> ScratchDir {
    let dir = scratch_dir(name);
    std::fs::copy(plugin_path("trapper"), dir.join("files.wasm")).expect("copy plugin");
    std::fs::write(dir.join("files.policy.toml"), policy).expect("write policy");
    std::fs::create_dir(dir.join("data")).expect("mkdir");
    std::fs::write(dir.join("data/hello.txt"), "hello from the host").expect("write");
    std::fs::write(dir.join("secret.txt"), "do not read").expect("write");
    dir
}

fn session(dir: &Path) -> ToolServerHandle {
    let loaded = host()
        .load(dir.join("files.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    register(&loaded)
}

/// One session of `plugin` in a new worker.
fn register(plugin: &LoadedPlugin) -> ToolServerHandle {
    let mut worker = Worker::new();
    worker
        .register_tools(plugin.definitions())
        .expect("registers");
    worker.tool_server_handle()
}

async fn call(
    handle: &ToolServerHandle,
    tool: &str,
    input: serde_json::Value,
) -> Result<String, ToolServerError> {
    handle.call_tool(tool, &input.to_string()).await
}

#[tokio::test]
async fn a_read_only_directory_can_be_read_but_not_written_or_escaped() {
    let dir = plugin_dir(
        "ro",
        "[[dirs]]\nhost = \"data\"\nguest = \"/data\"\nmode = \"ro\"\n",
    );
    let tools = session(&dir);
    assert_eq!(
        call(&tools, "read_file", json!({"path": "/data/hello.txt"}))
            .await
            .as_deref(),
        Ok("hello from the host")
    );
    assert_eq!(
        call(&tools, "list_dir", json!({"path": "/data"}))
            .await
            .as_deref(),
        Ok("hello.txt")
    );
    let write = call(
        &tools,
        "write_file",
        json!({"path": "/data/new.txt", "text": "x"}),
    )
    .await;
    assert!(write.is_err(), "{write:?}");
    assert!(
        !dir.join("data/new.txt").exists(),
        "nothing was written on the host"
    );
    for escape in [
        "/data/../secret.txt",
        "/secret.txt",
        "/data/../../etc/passwd",
    ] {
        let read = call(&tools, "read_file", json!({"path": escape})).await;
        assert!(read.is_err(), "{escape}: {read:?}");
    }
}

#[tokio::test]
async fn a_read_write_directory_can_be_written() {
    let dir = plugin_dir(
        "rw",
        "[[dirs]]\nhost = \"data\"\nguest = \"/work\"\nmode = \"rw\"\n",
    );
    let tools = session(&dir);
    assert_eq!(
        call(
            &tools,
            "write_file",
            json!({"path": "/work/out.txt", "text": "from the plugin"})
        )
        .await
        .as_deref(),
        Ok("written")
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("data/out.txt")).expect("written on the host"),
        "from the plugin"
    );
}

#[tokio::test]
async fn granted_environment_variables_are_visible_and_no_others() {
    let dir = plugin_dir(
        "env",
        "[env]\ninherit = [\"PATH\"]\nset = { MODE = \"test\" }\n",
    );
    let tools = session(&dir);
    let path = std::env::var("PATH").expect("the host has PATH");
    assert_eq!(
        call(&tools, "get_env", json!({"name": "PATH"}))
            .await
            .as_deref(),
        Ok(path.as_str())
    );
    assert_eq!(
        call(&tools, "get_env", json!({"name": "MODE"}))
            .await
            .as_deref(),
        Ok("test")
    );
    let home = call(&tools, "get_env", json!({"name": "HOME"})).await;
    assert!(home.is_err(), "HOME was not granted: {home:?}");
}

#[tokio::test]
async fn limits_in_the_policy_file_apply() {
    let dir = plugin_dir("limits", "[limits]\ntimeout_ms = 150\nmemory_mib = 16\n");
    let loaded = host()
        .load(dir.join("files.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.policy().limits.memory_bytes, 16 << 20);
    let tools = register(&loaded);
    let spin = call(&tools, "spin_forever", json!({})).await;
    assert!(
        matches!(&spin, Err(ToolServerError::ToolExecution(m)) if m.contains("150ms")),
        "{spin:?}"
    );
    let big = call(&tools, "allocate", json!({"mib": 20})).await;
    assert!(
        matches!(&big, Err(ToolServerError::ToolExecution(m)) if m.contains("16 MiB")),
        "{big:?}"
    );
}

#[test]
fn a_bad_policy_refuses_the_plugin_naming_file_and_key() {
    let dir = plugin_dir("bad", "[[dirs]]\nhost = \"missing\"\nguest = \"/m\"\n");
    let error = host().load(dir.join("files.wasm")).expect_err("refused");
    assert!(matches!(error, PluginError::Policy { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("files.policy.toml") && message.contains("dirs[0].host"),
        "{message}"
    );

    std::fs::write(dir.join("files.policy.toml"), "[limits]\nfuel = 5\n").expect("write");
    let message = host()
        .load(dir.join("files.wasm"))
        .expect_err("refused")
        .to_string();
    assert!(
        message.contains("files.policy.toml") && message.contains("fuel"),
        "{message}"
    );
}

#[test]
fn imports_show_what_a_plugin_may_ask_for() {
    let loaded = host()
        .load(plugin_path("trapper"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        loaded
            .imports()
            .iter()
            .any(|i| i.starts_with("wasi:filesystem/")),
        "{:?}",
        loaded.imports()
    );
    assert!(loaded.policy().dirs.is_empty() && loaded.policy().env.is_empty());
}

#[tokio::test]
async fn fuel_limits_stop_busy_plugins_on_hosts_that_meter_fuel() {
    let metered = PluginHost::with_limits(Limits::default().fuel(Some(50_000_000)))
        .unwrap_or_else(|e| panic!("{e}"));
    let loaded = metered
        .load(plugin_path("trapper"))
        .unwrap_or_else(|e| panic!("{e}"));
    let tools = register(&loaded);
    let spin = call(&tools, "spin_forever", json!({})).await;
    assert!(
        matches!(&spin, Err(ToolServerError::ToolExecution(m)) if m.contains("fuel of 50000000 units")),
        "{spin:?}"
    );
    assert_eq!(
        call(&tools, "tick", json!({})).await.as_deref(),
        Ok("0"),
        "refuelled per call"
    );
    assert_eq!(call(&tools, "tick", json!({})).await.as_deref(), Ok("1"));

    let dir = plugin_dir("fuel", "[limits]\nfuel = 1000\n");
    let error = host()
        .load(dir.join("files.wasm"))
        .expect_err("no metering on this host");
    assert!(error.to_string().contains("limits.fuel"), "{error}");
    // The policy's own fuel applies: 1000 units are not enough even to start.
    let error = metered
        .load(dir.join("files.wasm"))
        .expect_err("too little fuel");
    assert!(error.to_string().contains("fuel of 1000 units"), "{error}");
}
