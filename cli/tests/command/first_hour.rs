//! What a new user trips on, tried as a user runs the command: its exit code, stdout and stderr.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use llm_worker_tests::{ScratchDir, plugin_path, scratch_dir};

use super::cli::{stderr as err, stdout as out};

/// Runs the command in `cwd` with `args` (and `stdin`), logs at their defaults.
fn run_in(cwd: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .current_dir(cwd)
        .args(args)
        .env_remove("RUST_LOG")
        .env("XDG_CACHE_HOME", cwd.join("cache-home"))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn llm-worker");
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        pipe.write_all(bytes).expect("write stdin");
    }
    child.wait_with_output().expect("wait")
}

/// A directory laid out as after `./scripts/demo.sh`: `target/demo-plugins/` with the six
/// example plugins.
fn after_the_demo(name: &str) -> ScratchDir {
    let root = scratch_dir(name);
    let dir = root.join("target/demo-plugins");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for plugin in ["greet", "counter", "notes", "calc", "text", "search"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    root
}

/// A directory laid out as the README's install steps leave it: `llm-worker-plugins/` with the
/// six example plugins.
fn after_the_install(name: &str) -> ScratchDir {
    let root = scratch_dir(name);
    let dir = root.join("llm-worker-plugins");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for plugin in ["greet", "counter", "notes", "calc", "text", "search"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    root
}

/// The `llm-worker` commands of the README's "Install and use" section, as printed, with the
/// home directory (`~/`) read as `root`.
fn readme_commands(root: &std::path::Path) -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(llm_worker_tests::repo_root().join("README.md"))
        .expect("README.md");
    let section = readme
        .split("## Install and use")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the section");
    let home = format!("{}/", root.display());
    section
        .split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .flat_map(str::lines)
        .map(|line| line.split(" # ").next().unwrap_or(line).trim())
        .filter(|line| line.starts_with("llm-worker "))
        .map(|line| {
            // Words, with '…' quoting as a shell would.
            let mut words = Vec::new();
            let mut rest = line.trim_start_matches("llm-worker ").trim();
            while !rest.is_empty() {
                if let Some(quoted) = rest.strip_prefix('\'') {
                    let (word, after) = quoted.split_once('\'').expect("closing quote");
                    words.push(word.to_owned());
                    rest = after.trim_start();
                } else {
                    let (word, after) = rest.split_once(' ').unwrap_or((rest, ""));
                    words.push(word.replace("~/", &home));
                    rest = after.trim_start();
                }
            }
            words
        })
        .collect()
}

#[test]
fn the_readme_commands_work_as_printed() {
    let root = after_the_install("readme");
    let commands = readme_commands(root.path());
    assert!(commands.len() >= 3, "{commands:?}");
    assert!(
        commands.iter().any(|words| words[0] == "lock"),
        "{commands:?}"
    );
    for words in commands {
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        // A server runs until its client leaves: `mcp.rs` tests it.
        if args[0] == "serve" {
            continue;
        }
        let output = run_in(&root, &args, None);
        assert!(output.status.success(), "{args:?}: {}", err(&output));
        assert!(
            !out(&output).trim().is_empty() || !err(&output).trim().is_empty(),
            "{args:?} said nothing"
        );
        assert!(!err(&output).contains("WARN"), "{args:?}: {}", err(&output));
    }
    let listed = run_in(&root, &["list", "llm-worker-plugins/"], None);
    assert!(out(&listed).contains("greet.wasm"), "{}", out(&listed));
    let greeted = run_in(
        &root,
        &["call", "llm-worker-plugins", "greet", r#"{"name":"Ada"}"#],
        None,
    );
    assert_eq!(out(&greeted).trim(), "Hello, Ada!");
}

#[test]
fn a_directory_without_plugins_is_reported() {
    let root = scratch_dir("empty-dir");
    std::fs::create_dir_all(root.join("plugins/src")).expect("mkdir");
    std::fs::write(root.join("plugins/src/lib.rs"), "// sources, not plugins").expect("write");
    let listed = run_in(&root, &["list", "plugins"], None);
    assert!(listed.status.success());
    assert!(
        err(&listed).contains("plugins holds no plugins (no `.wasm` files")
            && err(&listed).contains("wasm32-wasip2"),
        "{}",
        err(&listed)
    );
    let called = run_in(&root, &["call", "plugins", "greet", "{}"], None);
    assert_eq!(called.status.code(), Some(1));
    assert!(
        err(&called).contains("holds no plugins"),
        "{}",
        err(&called)
    );
}

#[test]
fn recursive_listing_shows_relative_paths_and_skips_build_output() {
    let root = scratch_dir("recursive-paths");
    let dir = root.join("plugins");
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    std::fs::create_dir_all(dir.join("target/wasm32-wasip2/release")).expect("mkdir");
    std::fs::copy(plugin_path("counter"), dir.join("sub/counter.wasm")).expect("copy");
    std::fs::copy(
        plugin_path("greet"),
        dir.join("target/wasm32-wasip2/release/greet.wasm"),
    )
    .expect("copy");
    let listed = run_in(&root, &["list", "-r", "plugins"], None);
    assert!(listed.status.success(), "{}", err(&listed));
    assert!(
        out(&listed).contains("sub/counter.wasm"),
        "{}",
        out(&listed)
    );
    assert!(
        !out(&listed).contains("greet"),
        "target/ skipped: {}",
        out(&listed)
    );
    let all = run_in(&root, &["list", "-r", "--include-target", "plugins"], None);
    assert!(
        out(&all).contains("target/wasm32-wasip2/release/greet.wasm"),
        "{}",
        out(&all)
    );
}

#[test]
fn a_plugin_that_fails_to_start_is_not_an_unknown_tool() {
    let root = after_the_demo("fails-to-start");
    let called = run_in(
        &root,
        &[
            "call",
            "target/demo-plugins",
            "greet",
            r#"{"name":"Ada"}"#,
            "--memory-mib",
            "1",
        ],
        None,
    );
    assert_eq!(called.status.code(), Some(1), "{}", err(&called));
    let message = err(&called);
    assert!(
        message.contains("failed to load or start")
            && message.contains("greet.wasm")
            && message.contains("memory"),
        "{message}"
    );
    let listed = run_in(
        &root,
        &["list", "target/demo-plugins", "--memory-mib", "1"],
        None,
    );
    assert!(
        out(&listed).contains("greet.wasm") && out(&listed).contains("failed"),
        "{}",
        out(&listed)
    );
}

#[test]
fn stray_policy_files_are_reported_with_the_name_they_need() {
    let root = after_the_demo("stray-policies");
    let dir = root.join("target/demo-plugins");
    for stray in ["greet.toml", "greeet.policy.toml", "greet.wasm.policy.toml"] {
        std::fs::write(dir.join(stray), "[limits]\nmemory_mib = 8\n").expect("write");
    }
    let listed = run_in(&root, &["list", "target/demo-plugins"], None);
    let message = err(&listed);
    assert!(
        message.contains("greet.toml is not read: the policy of")
            && message.contains("greet.policy.toml"),
        "{message}"
    );
    assert!(
        message.contains("greeet.policy.toml is the policy of no plugin"),
        "{message}"
    );
    assert!(
        message.contains("greet.wasm.policy.toml is not read"),
        "{message}"
    );
    // Logs on a pipe have no colours.
    assert!(!message.contains('\u{1b}'), "{message:?}");
}

#[test]
fn input_comes_from_the_argument_or_stdin() {
    let root = after_the_demo("stdin");
    for args in [
        vec!["call", "target/demo-plugins", "greet", "-"],
        vec!["call", "target/demo-plugins", "greet"],
    ] {
        let called = run_in(
            &root,
            &args,
            Some("\u{feff}{\"name\":\"BOM\"}\n".as_bytes()),
        );
        assert!(called.status.success(), "{args:?}: {}", err(&called));
        assert!(out(&called).contains("Hello, BOM!"), "{}", out(&called));
    }
    // An enum mismatch names the allowed values.
    let called = run_in(
        &root,
        &[
            "call",
            "target/demo-plugins",
            "convert_case",
            r#"{"text":"a","case":"UPPER"}"#,
        ],
        None,
    );
    assert_eq!(called.status.code(), Some(1));
    assert!(
        err(&called).contains(r#""UPPER" is not one of "upper", "lower""#),
        "{}",
        err(&called)
    );
}

#[test]
fn an_invalid_rust_log_is_reported() {
    let root = after_the_demo("rust-log");
    let output = Command::new(env!("CARGO_BIN_EXE_llm-worker"))
        .current_dir(&root)
        .args(["list", "target/demo-plugins"])
        .env("RUST_LOG", "llm_worker=loud")
        .env("XDG_CACHE_HOME", root.join("cache-home"))
        .output()
        .expect("run");
    assert!(output.status.success());
    assert!(
        err(&output).contains("RUST_LOG=\"llm_worker=loud\" is not a valid filter"),
        "{}",
        err(&output)
    );
}

#[test]
fn policy_errors_name_what_to_change() {
    let root = after_the_demo("policy-errors");
    let dir = root.join("target/demo-plugins");
    std::fs::write(dir.join("greet.policy.toml"), "[limits]\nfuel = 100\n").expect("write");
    std::fs::write(dir.join("calc.policy.toml"), "[limits]\nmemory_mib = \n").expect("write");
    let checked = run_in(&root, &["check", "target/demo-plugins"], None);
    assert_eq!(checked.status.code(), Some(1));
    let text = out(&checked);
    assert!(text.contains("--fuel"), "{text}");
    // The TOML parser's excerpt keeps its lines.
    let excerpt = text
        .lines()
        .skip_while(|line| !line.contains("calc.policy.toml"))
        .take(4)
        .collect::<Vec<_>>();
    assert!(excerpt.iter().any(|line| line.contains('|')), "{text}");
}
