//! The `llm-worker` binary run as a process on the example plugins.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use llm_worker_tests::{ScratchDir, compiled_cache, plugin_path, scratch_dir};

/// A fresh directory holding copies of `plugins` in a scratch directory (removed when the
/// first value is dropped), and the compiled cache the tests share.
pub(crate) fn plugin_dir(name: &str, plugins: &[&str]) -> (ScratchDir, PathBuf, PathBuf) {
    // The first tests to run (these) start the reference servers' installs, which the
    // side-by-side tests (`reference`) wait for much later.
    llm_worker_tests::reference::install_in_background(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let root = scratch_dir(name);
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    for plugin in plugins {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    (root, dir, compiled_cache().to_owned())
}

pub(crate) fn run(cache: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    run_with_env(cache, args, stdin, &[])
}

/// [`run`] with the variables `env` set in the command's environment.
pub(crate) fn run_with_env(
    cache: &Path,
    args: &[&str],
    stdin: Option<&str>,
    env: &[(&str, &str)],
) -> Output {
    // The loading options go after the subcommand: `llm-worker list --cache-dir DIR …`.
    let at = args
        .iter()
        .position(|arg| ["list", "call", "check", "schema", "serve"].contains(arg))
        .map_or(args.len(), |at| at + 1);
    let mut command = Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .args(&args[..at])
        .arg("--cache-dir")
        .arg(cache)
        .args(&args[at..])
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn llm-worker");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("wait")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn list_shows_a_table_and_json() {
    let (_root, dir, cache) = plugin_dir("cli-list", &["greet", "counter"]);
    let out = run(&cache, &["list", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("TOOL") && lines[0].contains("PLUGIN"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("count") && lines[1].contains("counter.wasm"),
        "{table}"
    );
    assert!(
        table.contains("greet") && table.contains("挨拶する"),
        "{table}"
    );

    let out = run(&cache, &["list", path(&dir), "--json"], None);
    let tools: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(tools.as_array().map(Vec::len), Some(3));
    assert_eq!(tools[0]["tool"], "count");
    assert_eq!(tools[1]["tool"], "greet");
    assert_eq!(tools[1]["input_schema"]["required"][0], "name");
    // A plugin that fails to load: what is listed is not the whole directory, and the exit
    // status says so (with --json too, whose array lists the plugins that loaded).
    std::fs::write(dir.join("broken.wasm"), b"not wasm").expect("write");
    for json in [false, true] {
        let mut args = vec!["list", path(&dir)];
        args.extend(json.then_some("--json"));
        let out = run(&cache, &args, None);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stdout(&out).contains("greet") && stderr(&out).contains("broken.wasm"));
    }
}

#[test]
fn call_prints_results_and_fails_on_tool_errors() {
    let (_root, dir, cache) = plugin_dir("cli-call", &["greet", "calc"]);
    let out = run(
        &cache,
        &["call", path(&dir), "greet", r#"{"name":"CLI"}"#],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Hello, CLI!");

    let out = run(
        &cache,
        &["call", path(&dir), "add"],
        Some(r#"{"a":2,"b":3}"#),
    );
    assert_eq!(
        stdout(&out).trim(),
        "5.0",
        "input from stdin: {}",
        stderr(&out)
    );

    let out = run(
        &cache,
        &[
            "call",
            path(&dir),
            "divide",
            r#"{"dividend":1,"divisor":0}"#,
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).is_empty());
    assert!(
        stderr(&out).contains("division by zero"),
        "{}",
        stderr(&out)
    );

    let out = run(&cache, &["call", path(&dir), "nope", "{}"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the tools are: add, divide, greet, isqrt"),
        "{}",
        stderr(&out)
    );
}

/// Text a plugin or its caller chose (here an input the schema check quotes back) reaches
/// the terminal with its control and bidirectional characters escaped, never acted on.
#[test]
fn errors_show_hidden_characters_escaped() {
    let (_root, dir, cache) = plugin_dir("cli-hidden", &["calc"]);
    let out = run(
        &cache,
        &[
            "call",
            path(&dir),
            "add",
            "{\"a\":\"x\u{9b}2J\u{202e}y\",\"b\":1}",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = stderr(&out);
    assert!(
        stderr.contains("x\\u{9b}2J\\u{202e}y") && !stderr.contains('\u{9b}'),
        "{stderr}"
    );
}

#[test]
fn log_lines_show_a_plugins_text_escaped_and_cannot_be_forged() {
    // A schema refused for a reference it cannot resolve, at a member whose name the refusal
    // quotes: an escape sequence and a line of its own that would read as another warning.
    let (_root, dir, cache) = plugin_dir("cli-log-text", &["greet"]);
    let schema = r##"{"type":"object","properties":{"a\u001b[2J\n2026-01-01T00:00:00Z  WARN forged":{"$ref":"#/$defs/missing"}}}"##;
    let wasm = llm_worker_tests::wat::WatComponent::new(&[("t", "A tool.", schema)])
        .echo()
        .build();
    std::fs::write(dir.join("forger.wasm"), wasm).expect("write");
    let out = run(&cache, &["list", path(&dir)], None);
    let stderr = stderr(&out);
    assert!(
        stderr.contains("forger.wasm")
            && stderr.contains("\\u{1b}[2J")
            && !stderr.contains('\u{1b}')
            && stderr.contains("\n    2026-01-01T00:00:00Z  WARN forged")
            && !stderr.contains("\n2026-01-01T00:00:00Z  WARN forged"),
        "{stderr}"
    );
}

/// rmcp logs every failed request's id and error at `warn` (the default level), and an error
/// may quote what the client sent: a request of a few megabytes (a cursor of a million
/// characters the log escapes) made a log line of ten or more. Each field is cut at 4 KiB. (A
/// string id over 256 bytes is refused before rmcp reads the request.)
#[test]
fn a_clients_text_cannot_make_a_log_line_of_megabytes() {
    let (_root, dir, cache) = plugin_dir("cli-log-flood", &["greet"]);
    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let request = serde_json::json!({
        "jsonrpc": "2.0",
        "id": "i".repeat(256),
        "method": "tools/list",
        "params": { "cursor": "\u{85}".repeat(1 << 20) },
    });
    let input = format!("{initialize}\n{initialized}\n{request}\n");
    let out = run(&cache, &["serve", path(&dir)], Some(&input));
    let stderr = stderr(&out);
    let longest = stderr.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 16 << 10, "a log line of {longest} bytes");
    assert!(
        stderr.contains("[cut: longer than 4096 bytes]"),
        "{}",
        &stderr[..stderr.len().min(2000)]
    );
    // The client was answered, with the error.
    assert!(
        stdout(&out).contains("cursor"),
        "{}",
        &stdout(&out)[..200.min(stdout(&out).len())]
    );
}

#[test]
fn check_reports_each_file_and_fails_on_a_refused_plugin() {
    let (_root, dir, cache) = plugin_dir("cli-check", &["greet"]);
    let out = run(&cache, &["check", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(
        report.contains("ok       greet.wasm  tools: greet"),
        "{report}"
    );
    assert!(
        report.contains("imports: ") && report.contains("wasi:cli/environment"),
        "{report}"
    );
    assert!(
        report.contains("grants: env [], dirs [], http []"),
        "{report}"
    );
    // Every limit the policy may set, not only memory and time.
    assert!(
        report.contains("limits: memory 64 MiB, time 10s, input 1048576 B, output 1048576 B"),
        "{report}"
    );
    // How many failures in a row disable the plugin: a policy setting it very high keeps a
    // crashing plugin restarting at every call.
    assert!(
        report.contains("disabled after 5 failures in a row"),
        "{report}"
    );
    // A grant whose names may resolve to private addresses says so: a reviewer told only the
    // name could not tell it from one kept to public addresses.
    std::fs::write(
        dir.join("greet.policy.toml"),
        "[http]\nallow = [\"https://api.example.com\"]\nallow_private = [\"https://*.corp.example\"]\n\n[limits]\ntask_timeout_ms = 60000\n",
    )
    .expect("policy");
    let out = run(&cache, &["check", path(&dir)], None);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let report = stdout(&out);
    assert!(
        report.contains(
            "http [https://api.example.com, https://*.corp.example (may reach private addresses)]"
        ),
        "{report}"
    );
    assert!(report.contains("tasks 60s"), "{report}");
    // A secret header shows its name and the variables its value comes from, never the value.
    std::fs::write(
        dir.join("greet.policy.toml"),
        "[http]\nallow = [\"https://api.example.com\"]\n\n[[http.secrets]]\nhost = \"https://api.example.com\"\nheader = \"Authorization\"\nvalue = \"Bearer ${CHECK_TEST_TOKEN}\"\n",
    )
    .expect("policy");
    let out = run_with_env(
        &cache,
        &["check", path(&dir)],
        None,
        &[("CHECK_TEST_TOKEN", "sk-not-shown")],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let report = stdout(&out);
    assert!(
        report.contains(
            "secret: header Authorization set by the host on requests to \
             https://api.example.com (value from the host's $CHECK_TEST_TOKEN)"
        ),
        "{report}"
    );
    assert!(!report.contains("sk-not-shown"), "{report}");
    std::fs::remove_file(dir.join("greet.policy.toml")).expect("remove");

    std::fs::write(dir.join("broken.wasm"), b"nope").expect("write");
    let out = run(&cache, &["check", path(&dir)], None);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout(&out);
    assert!(
        report.contains("refused  plugin") && report.contains("broken.wasm"),
        "{report}"
    );
    assert!(
        report.contains("ok       greet.wasm"),
        "the good plugin still loads: {report}"
    );

    // A file whose name holds line breaks cannot add lines that read as the report's.
    let forged = "x\nok       notes.wasm  tools: read_note\n         lock: approved\n.wasm";
    std::fs::rename(dir.join("broken.wasm"), dir.join(forged)).expect("rename");
    let out = run(&cache, &["check", path(&dir)], None);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout(&out);
    assert!(
        !report
            .lines()
            .any(|line| line.starts_with("ok       notes.wasm")
                || line.trim_start().starts_with("lock: approved"))
            && report.contains("x\\nok       notes.wasm"),
        "{report}"
    );
}

#[test]
fn check_shows_the_hints_it_vouches_for_and_the_claims_it_dropped() {
    let (_root, dir, cache) = plugin_dir("cli-check-hints", &["text"]);
    let out = run(&cache, &["check", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(
        report.contains("contract: llm-worker:tool@1.0.0"),
        "{report}"
    );
    assert!(
        report.contains(
            "tool stats: structured result; read-only, idempotent (claimed), not open-world"
        ),
        "{report}"
    );

    // Granted a read-write directory, the read-only claim is dropped, and `check` says so.
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::write(
        dir.join("text.policy.toml"),
        format!(
            "[[dirs]]\nhost = {:?}\nguest = \"/data\"\nmode = \"rw\"\n",
            data.display().to_string()
        ),
    )
    .expect("write");
    let out = run(&cache, &["check", path(&dir)], None);
    let report = stdout(&out);
    assert!(
        report.contains("tool stats: structured result; idempotent (claimed), not open-world"),
        "{report}"
    );
    assert!(
        report.contains("warning: tool 'stats' claims to be read-only, but its policy grants the read-write directory"),
        "{report}"
    );
}

#[test]
fn schema_prints_each_provider_shape() {
    let (_root, dir, cache) = plugin_dir("cli-schema", &["greet", "calc"]);
    let shape = |format: &str| -> serde_json::Value {
        let out = run(&cache, &["schema", path(&dir), "--format", format], None);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let openai = shape("openai");
    assert_eq!(openai[0]["type"], "function");
    assert_eq!(openai[0]["function"]["name"], "add", "sorted by name");
    assert!(openai[0]["function"]["parameters"].get("$schema").is_none());
    assert_eq!(shape("anthropic")[2]["input_schema"]["required"][0], "name");
    assert_eq!(shape("gemini")["functionDeclarations"][1]["name"], "divide");
    assert_eq!(shape("mcp")["tools"][2]["inputSchema"]["type"], "object");

    let out = run(&cache, &["schema", path(&dir), "--format", "cohere"], None);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("use openai, anthropic, gemini or mcp"),
        "{}",
        stderr(&out)
    );

    // A plugin that fails to load: the others' definitions, and failure (a script would
    // otherwise ship a part of the directory's tools for the whole).
    std::fs::write(dir.join("broken.wasm"), b"nope").expect("write");
    let out = run(&cache, &["schema", path(&dir), "--format", "mcp"], None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let partial: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        partial["tools"].as_array().map(Vec::len),
        Some(4),
        "{partial}"
    );
    // A directory of no plugins is an error, not an empty list.
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let out = run(&cache, &["schema", path(&empty), "--format", "mcp"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("holds no plugins"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn schema_strict_declares_openai_strict_functions_only() {
    let plugins = ["greet", "calc", "counter", "notes", "search", "text"];
    let (_root, dir, cache) = plugin_dir("cli-schema-strict", &plugins);
    let args = ["schema", path(&dir), "--format", "openai", "--strict"];
    let out = run(&cache, &args, None);
    assert!(out.status.success(), "{}", stderr(&out));
    let tools: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let tools = tools.as_array().expect("a list");
    assert!(tools.len() >= 12, "{tools:?}");
    for tool in tools {
        let function = &tool["function"];
        assert_eq!(function["strict"], true, "{tool}");
        assert_eq!(function["parameters"]["type"], "object", "{tool}");
        assert_eq!(
            function["parameters"]["additionalProperties"], false,
            "{tool}"
        );
    }

    let out = run(
        &cache,
        &["schema", path(&dir), "--format", "anthropic", "--strict"],
        None,
    );
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    let message = stderr(&out);
    assert!(
        message.contains("--strict") && message.contains("--format openai"),
        "{message}"
    );
}

#[test]
fn a_second_start_compiles_nothing() {
    let (root, dir, _) = plugin_dir("cli-cache", &["greet", "counter"]);
    // A cache of its own: the first start compiles.
    let cache = root.join("cache");
    let out = run(&cache, &["-v", "list", path(&dir)], None);
    assert!(
        stderr(&out).matches("compiled and cached").count() == 2,
        "{}",
        stderr(&out)
    );
    let out = run(&cache, &["-v", "list", path(&dir)], None);
    let log = stderr(&out);
    assert_eq!(log.matches("compiled and cached").count(), 0, "{log}");
    assert_eq!(log.matches("compiled cache hit").count(), 2, "{log}");
}

#[test]
fn a_missing_directory_is_a_clear_error() {
    let cache = scratch_dir("cli-missing");
    let out = run(&cache, &["list", "/no/such/dir"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot read the plugin directory /no/such/dir"),
        "{}",
        stderr(&out)
    );
}

/// What `new` refuses, writing nothing: bad names, an SDK that is not one, an existing crate.
/// (`first_hour.rs` builds, tests and serves what it makes.)
#[test]
fn new_refuses_bad_names_and_sdks_and_never_overwrites() {
    let root = scratch_dir("cli-new");
    let new = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_llm-worker"))
            .current_dir(&root)
            .arg("new")
            .args(args)
            .output()
            .expect("run new")
    };
    let out = new(&["Bad Name"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not a good crate name"),
        "{}",
        stderr(&out)
    );

    for reserved in ["self", "crate", "std", "type"] {
        let out = new(&[reserved]);
        assert!(
            !out.status.success() && stderr(&out).contains("keyword"),
            "{reserved}: {}",
            stderr(&out)
        );
    }
    // Names whose type would be one the generated code uses from Rust's prelude.
    for taken in [
        "string",
        "result",
        "ok",
        "self_",
        "tool-hello",
        "hello-args",
    ] {
        let out = new(&[taken]);
        assert!(
            !out.status.success() && stderr(&out).contains("for Rust's own"),
            "{taken}: {}",
            stderr(&out)
        );
        assert!(!root.join(taken).exists(), "{taken}");
    }
    for not_an_sdk in [
        "/no/such/sdk",
        path(&llm_worker_tests::repo_root().join("host")),
    ] {
        let missing = new(&["lost", "--sdk", not_an_sdk]);
        assert!(
            !missing.status.success()
                && stderr(&missing).contains(&format!("--sdk {not_an_sdk}: no llm-worker SDK")),
            "{}",
            stderr(&missing)
        );
    }
    assert!(!root.join("lost").exists());

    // The SDK's directory or the checkout holding it.
    let checkout = llm_worker_tests::repo_root();
    for (name, sdk) in [
        ("by-sdk", checkout.join("guest-sdk")),
        ("by-checkout", checkout.to_owned()),
    ] {
        let out = new(&[name, "--sdk", path(&sdk)]);
        assert!(out.status.success(), "{}", stderr(&out));
        let manifest =
            std::fs::read_to_string(root.join(name).join("Cargo.toml")).expect("Cargo.toml");
        let sdk = checkout.join("guest-sdk").canonicalize().expect("the SDK");
        assert!(
            manifest.contains(&format!(
                "llm-worker-guest = {{ path = \"{}\" }}",
                path(&sdk)
            )),
            "{manifest}"
        );
    }
    let lib = std::fs::read_to_string(root.join("by-sdk/src/lib.rs")).expect("lib.rs");
    assert!(!lib.contains("__private"), "{lib}");
    let before = std::fs::read_to_string(root.join("by-sdk/src/lib.rs")).expect("lib.rs");
    std::fs::write(root.join("by-sdk/src/lib.rs"), "// mine").expect("write");
    let again = new(&["by-sdk"]);
    assert_eq!(
        again.status.code(),
        Some(1),
        "an existing crate is not overwritten"
    );
    assert!(
        stderr(&again).contains("exists already"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("by-sdk/src/lib.rs")).expect("lib.rs"),
        "// mine"
    );
    assert!(before.contains("#[tool_registry]"), "{before}");
}

/// The attack: another user who may write the directory `new` runs in swaps the crate's
/// directory for a link as it is made (its mode was then set through the link, on a file of
/// the author's), or a `.cargo/config.toml` above the crate that others may change names a
/// `rustc-wrapper` (their code, run by the author's first `cargo test`). `new` makes a crate
/// only where no one else could change what cargo builds it with.
#[test]
fn new_refuses_a_directory_others_may_write_or_a_cargo_config_they_could_change() {
    use std::os::unix::fs::PermissionsExt;
    let root = scratch_dir("cli-new-around");
    let new_in = |dir: &Path, name: &str| {
        Command::new(env!("CARGO_BIN_EXE_llm-worker"))
            .current_dir(dir)
            .args(["new", name])
            .output()
            .expect("run new")
    };
    let shared = root.join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = new_in(&shared, "tool");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not making the crate in") && stderr(&out).contains("other users"),
        "{}",
        stderr(&out)
    );
    assert!(!shared.join("tool").exists());

    let team = root.join("team");
    std::fs::create_dir_all(team.join(".cargo")).expect("mkdir");
    std::fs::create_dir(team.join("mine")).expect("mkdir");
    let config = team.join(".cargo/config.toml");
    std::fs::write(&config, "[build]\nrustc-wrapper = \"/tmp/x\"\n").expect("write");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = new_in(&team.join("mine"), "tool");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cargo would read") && stderr(&out).contains("config.toml"),
        "{}",
        stderr(&out)
    );
    assert!(!team.join("mine/tool").exists());
    // The same file, the author's alone: the crate is made.
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = new_in(&team.join("mine"), "tool");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// What `new` makes is the author's to change and everyone's to read, whatever the umask it
/// runs under: a permissive one (000) does not leave the crate writable by others, whose code
/// the author would then build and run.
#[test]
fn new_makes_a_crate_others_cannot_write_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let root = scratch_dir("cli-new-umask");
    let out = Command::new("sh")
        .current_dir(&root)
        .args(["-c", "umask 000 && exec \"$0\" new open-umask"])
        .arg(env!("CARGO_BIN_EXE_llm-worker"))
        .output()
        .expect("run new under sh");
    assert!(out.status.success(), "{}", stderr(&out));
    let mut seen = (0, 0);
    let mut pending = vec![root.join("open-umask")];
    while let Some(dir) = pending.pop() {
        let mode = std::fs::symlink_metadata(&dir)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755, "{}", dir.display());
        seen.0 += 1;
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let kind = entry.file_type().expect("file type");
            if kind.is_dir() {
                pending.push(entry.path());
            } else {
                assert!(kind.is_file(), "{}: only files", entry.path().display());
                let mode = entry.metadata().expect("stat").permissions().mode();
                assert_eq!(mode & 0o777, 0o644, "{}", entry.path().display());
                seen.1 += 1;
            }
        }
    }
    // The crate, `src/`, and its manifest, toolchain file and code at least.
    assert!(seen.0 >= 2 && seen.1 >= 3, "{seen:?}");
}

/// `call` reads its input from stdin within a bound: an endless stream is refused after
/// 64 MiB, with what to do, rather than read until memory runs out.
#[test]
fn call_refuses_an_endless_stdin() {
    let (_root, dir, cache) = plugin_dir("cli-endless-stdin", &["greet"]);
    let out = Command::new(env!("CARGO_BIN_EXE_llm-worker"))
        .args([
            "call",
            "--cache-dir",
            path(&cache),
            path(&dir),
            "greet",
            "-",
        ])
        .env_remove("RUST_LOG")
        .stdin(std::fs::File::open("/dev/zero").expect("/dev/zero"))
        .output()
        .expect("run call");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the input of 'greet' on stdin is over 64 MiB"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn recursive_reads_subdirectories() {
    let (_root, dir, cache) = plugin_dir("cli-recursive", &["greet"]);
    std::fs::create_dir(dir.join("nested")).expect("mkdir");
    std::fs::copy(plugin_path("counter"), dir.join("nested/counter.wasm")).expect("copy");
    let flat = stdout(&run(&cache, &["list", path(&dir)], None));
    // It listed greet: a listing that failed would lack `count` too.
    assert!(flat.contains("greet") && !flat.contains("count"), "{flat}");
    let deep = stdout(&run(&cache, &["list", "--recursive", path(&dir)], None));
    assert!(deep.contains("count") && deep.contains("greet"), "{deep}");
}

#[test]
fn a_pool_serves_calls_starting_only_the_called_plugin() {
    let (_root, dir, cache) = plugin_dir("cli-pool", &["greet", "counter"]);
    let out = run(
        &cache,
        &[
            "call",
            "--pool",
            "4",
            path(&dir),
            "greet",
            r#"{"name":"Ada"}"#,
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Hello, Ada!");

    // `call` starts only the plugin it calls: one slot is enough beside another plugin.
    let out = run(
        &cache,
        &[
            "call",
            "--pool",
            "1",
            path(&dir),
            "greet",
            r#"{"name":"Ada"}"#,
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Hello, Ada!");
}

#[test]
fn limits_on_the_command_line_are_validated_like_policy_values() {
    let (_root, dir, cache) = plugin_dir("cli-limits", &["greet"]);
    for (flag, value) in [
        ("--memory-mib", "0"),
        ("--memory-mib", "4097"),
        ("--memory-mib", "18446744073709551615"),
        ("--timeout-ms", "0"),
        ("--fuel", "0"),
        ("--pool", "0"),
    ] {
        let out = run(&cache, &["list", flag, value, path(&dir)], None);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let message = stderr(&out);
        assert!(
            message.contains(flag) && message.contains(value),
            "{flag} {value}: {message}"
        );
    }
    let out = run(&cache, &["list", "--memory-mib", "4096", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn call_reports_a_failure_once_and_ends_its_output_with_a_newline() {
    let (_root, dir, cache) = plugin_dir("cli-call-once", &["calc", "trapper"]);
    let out = run(
        &cache,
        &[
            "call",
            path(&dir),
            "divide",
            r#"{"dividend":1,"divisor":0}"#,
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert_eq!(
        message,
        "error: tool 'divide': Execution failed: division by zero; give a divisor other than 0\n",
        "one line, one prefix"
    );
    // A trap is logged by the host and returned as the error: printed once.
    let out = run(&cache, &["call", path(&dir), "panic", "{}"], None);
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(message.contains("panicked"), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    let out = run(
        &cache,
        &["call", path(&dir), "add", r#"{"a":1,"b":2}"#],
        None,
    );
    assert_eq!(stdout(&out), "3.0\n");
}

#[test]
fn new_help_shows_only_what_applies_to_new() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
        .args(["new", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--sdk"), "{help}");
    for unrelated in [
        "--cache-dir",
        "--memory-mib",
        "--pool",
        "--recursive",
        "--fuel",
    ] {
        assert!(!help.contains(unrelated), "{unrelated} in: {help}");
    }
}

#[test]
fn lock_approves_a_directory_and_check_finds_drift() {
    let (_root, dir, cache) = plugin_dir("cli-lock", &["greet", "counter"]);
    let out = run(&cache, &["lock", "--check", path(&dir)], None);
    assert_eq!(out.status.code(), Some(1), "no lock file yet");
    assert!(
        stderr(&out).contains("has no llm-worker.lock"),
        "{}",
        stderr(&out)
    );
    let out = run(&cache, &["lock", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    // A first lock names every plugin it approves (after a lock was deleted and a plugin
    // swapped, the operator sees what they approve).
    let first = stdout(&out);
    assert!(
        first.contains("2 plugin(s)")
            && first.contains("approved: greet.wasm: not in the lock")
            && first.contains("approved: counter.wasm: not in the lock"),
        "{first}"
    );
    let out = run(&cache, &["lock", "--check", path(&dir)], None);
    assert!(out.status.success(), "{}", stdout(&out));
    let out = run(&cache, &["check", path(&dir)], None);
    assert!(
        stdout(&out).contains("lock: approved by llm-worker.lock"),
        "{}",
        stdout(&out)
    );

    // Drift: a new plugin and a changed policy.
    std::fs::copy(plugin_path("calc"), dir.join("calc.wasm")).expect("copy");
    std::fs::write(dir.join("greet.policy.toml"), "[limits]\nmemory_mib = 8\n").expect("write");
    let out = run(&cache, &["lock", "--check", path(&dir)], None);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout(&out);
    assert!(
        report.contains("calc.wasm: not in the lock")
            && report.contains("greet.wasm: its policy changed"),
        "{report}"
    );
    let out = run(&cache, &["list", path(&dir)], None);
    let warnings = stderr(&out);
    assert!(
        warnings.contains("calc.wasm is not approved") && warnings.contains("llm-worker lock"),
        "{warnings}"
    );
    // Only counter is still approved as it is: its tools are listed, calc's are not.
    let listed = stdout(&out);
    assert!(
        listed.contains("count") && !listed.contains("add "),
        "calc's tools are not served: {listed}"
    );
    let out = run(
        &cache,
        &["call", path(&dir), "add", r#"{"a":1,"b":2}"#],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // Approving the drift says what was approved, line by line.
    let out = run(&cache, &["lock", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let approved = stdout(&out);
    assert!(
        approved.contains("approved: calc.wasm: not in the lock")
            && approved.contains("approved: greet.wasm: its policy changed (sha256 "),
        "{approved}"
    );
    // Nothing changed since: nothing is said to be approved.
    let out = run(&cache, &["lock", path(&dir)], None);
    assert!(!stdout(&out).contains("approved:"), "{}", stdout(&out));

    // The same bytes and policy offering other tools (a plugin that lists them differently at
    // another time; here the lock's list is made to differ, the same to the comparison): a
    // drift `--check` reports, and `lock` names when it approves it.
    let lock = dir.join("llm-worker.lock");
    let text = std::fs::read_to_string(&lock).expect("lock");
    assert!(text.contains("tools = [\"greet\"]"), "{text}");
    std::fs::write(
        &lock,
        text.replace("tools = [\"greet\"]", "tools = [\"welcome\"]"),
    )
    .expect("write");
    let out = run(&cache, &["lock", "--check", path(&dir)], None);
    assert_eq!(out.status.code(), Some(1));
    let moved = "greet.wasm: its tools changed (new: 'greet'; gone: 'welcome')";
    assert!(stdout(&out).contains(moved), "{}", stdout(&out));
    let out = run(&cache, &["lock", path(&dir)], None);
    assert!(
        stdout(&out).contains(&format!("approved: {moved}")),
        "{}",
        stdout(&out)
    );
}

/// A directory with a trust policy says its plugins are verified, through the lock's record of
/// where each was pulled from. With that lock deleted (and a plugin swapped), the `lock` its
/// error suggests approves every file as it is now: it names each and warns that no provenance
/// is recorded, rather than saying only how many it wrote.
#[test]
fn locking_a_trusting_directory_without_a_lock_warns_of_lost_provenance() {
    let (_root, dir, cache) = plugin_dir("cli-lock-trusting", &["greet"]);
    std::fs::write(
        dir.join("llm-worker.trust.toml"),
        "[[rule]]\nrepository = \"localhost:5000/scratch/*\"\nunsigned = true\n",
    )
    .expect("trust policy");
    let out = run(&cache, &["lock", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("approved: greet.wasm: not in the lock"),
        "{}",
        stdout(&out)
    );
    let warned = stderr(&out);
    assert!(
        warned.contains("had no llm-worker.lock")
            && warned.contains("none with a registry's provenance")
            && warned.contains("restore it from version control"),
        "{warned}"
    );
    // With a lock before, no such warning.
    let out = run(&cache, &["lock", path(&dir)], None);
    assert!(!stderr(&out).contains("had no"), "{}", stderr(&out));
}

/// A lock file that cannot be read is not written over without a word: `lock` used to warn and
/// approve whatever the directory held (what made the lock untrusted included), saying nothing
/// of the plugins it approved.
#[test]
fn an_unreadable_lock_is_replaced_only_when_asked_and_every_plugin_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let (_root, dir, cache) = plugin_dir("cli-lock-unreadable", &["greet", "counter"]);
    let out = run(&cache, &["lock", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    // Someone else could have written it (writable by all), and swapped a plugin.
    let lock = dir.join("llm-worker.lock");
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    std::fs::copy(plugin_path("calc"), dir.join("greet.wasm")).expect("copy");
    let before = std::fs::read(&lock).expect("the lock");
    let out = run(&cache, &["lock", path(&dir)], None);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(
        said.contains("not trusted")
            && said.contains("nothing written")
            && said.contains("--replace-unreadable"),
        "{said}"
    );
    assert_eq!(std::fs::read(&lock).expect("the lock"), before, "unchanged");
    // Asked to: every plugin is named as approved anew.
    let out = run(&cache, &["lock", "--replace-unreadable", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let approved = stdout(&out);
    assert!(
        approved.contains("approved: greet.wasm: not in the lock")
            && approved.contains("approved: counter.wasm: not in the lock"),
        "{approved}"
    );
    assert!(
        stderr(&out).contains("replacing a lock that cannot be read"),
        "{}",
        stderr(&out)
    );
}

/// A directory others may write cannot hold a lock that protects anything: `lock` says so
/// first (it used to write one, which loading then refused, and its error said to run `lock`
/// again).
#[test]
fn lock_refuses_a_directory_others_may_write() {
    use std::os::unix::fs::PermissionsExt;
    let (_root, dir, cache) = plugin_dir("cli-lock-open-dir", &["greet"]);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = run(&cache, &["lock", path(&dir)], None);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(
        said.contains("cannot hold a lock") && said.contains("chmod go-w"),
        "{said}"
    );
    assert!(!dir.join("llm-worker.lock").exists(), "nothing written");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = run(&cache, &["lock", path(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
}
