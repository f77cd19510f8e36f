//! What a new user trips on, tried as a user runs the command: its exit code, stdout and stderr.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use llm_worker_tests::{ScratchDir, cache_home, plugin_path, repo_root, scratch_dir};
use rmcp::ServiceExt;
use serde_json::json;

use super::cli::{stderr as err, stdout as out};
use super::mcp::{call, text};

/// Runs the command in `cwd` with `args` (and `stdin`), logs at their defaults.
fn run_in(cwd: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .current_dir(cwd)
        .args(args)
        .env_remove("RUST_LOG")
        .env("XDG_CACHE_HOME", cache_home())
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

/// A scratch directory holding the six example plugins in `plugins` (a path below it).
fn with_the_examples_in(name: &str, plugins: &str) -> ScratchDir {
    let root = scratch_dir(name);
    let dir = root.join(plugins);
    std::fs::create_dir_all(&dir).expect("mkdir");
    for plugin in ["greet", "counter", "notes", "calc", "text", "search"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    root
}

/// A directory laid out as after `./scripts/demo.sh`: `target/demo-plugins/` with the six
/// example plugins.
fn after_the_demo(name: &str) -> ScratchDir {
    with_the_examples_in(name, "target/demo-plugins")
}

/// A directory laid out as the README's install steps leave it: `llm-worker-plugins/` with the
/// six example plugins.
fn after_the_install(name: &str) -> ScratchDir {
    with_the_examples_in(name, "llm-worker-plugins")
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
    // The access policy is not a stray policy: renamed on such a warning's word, it would
    // give every identity of `serve --http` every tool.
    std::fs::write(
        dir.join("llm-worker.access.toml"),
        "[[grant]]\nwho = [\"*\"]\ntools = [\"greet/*\"]\n",
    )
    .expect("write");
    let listed = run_in(&root, &["list", "target/demo-plugins"], None);
    let message = err(&listed);
    assert!(!message.contains("llm-worker.access.toml"), "{message}");
    std::fs::remove_file(dir.join("llm-worker.access.toml")).expect("remove");
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
        .env("XDG_CACHE_HOME", cache_home())
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
    // Where the file does not parse: its line and column, and the key there (the file is not
    // quoted: a value beside a typo may be a secret).
    assert!(
        text.lines().any(|line| line.contains("calc.policy.toml")
            && line.contains("at line 2, column 14 (`memory_mib = …`)")),
        "{text}"
    );
}

/// `cargo` as a plugin's author runs it in `dir`: the one on PATH (rustup's, which reads the
/// crate's rust-toolchain.toml), without the toolchain and flags of the cargo running this
/// test. Its build directory is `target_dir`.
fn authors_cargo(dir: &Path, target_dir: &Path, args: &[&str]) -> Output {
    Command::new("cargo")
        .current_dir(dir)
        .args(args)
        // Set by rustup for this test's process; it would override the crate's toolchain file.
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env("CARGO_TARGET_DIR", target_dir)
        .stdin(Stdio::null())
        .output()
        .expect("run cargo")
}

/// The plugin quick start, from a directory outside the checkout: `llm-worker new demo`, then
/// in it `cargo test` and `cargo build --release --target wasm32-wasip2`, then `llm-worker
/// call`, `list` and `serve` on what it built. One thing differs from an author's run: the
/// build directory is the example plugins' (`plugins/target`, which the demo and the plugins'
/// own tests have filled), so that the SDK's dependencies, built with the same lock file and
/// profiles, are not compiled again for this test: on a fresh machine that was a minute of the
/// test run. The crate still resolves and builds from its own manifest and lock file.
#[test]
fn a_new_plugin_tests_builds_and_serves_from_outside_the_checkout() {
    let root = scratch_dir("first-plugin");
    let checkout = repo_root().canonicalize().expect("the checkout");
    assert!(!root.canonicalize().expect("root").starts_with(&checkout));

    let created = run_in(&root, &["new", "demo"], None);
    assert!(created.status.success(), "{}", err(&created));
    assert!(out(&created).contains("cd demo"), "{}", out(&created));
    let crate_dir = root.join("demo");
    // The SDK it was built from, by path: the SDK is not on crates.io.
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("read"))
            .expect("Cargo.toml is TOML");
    let sdk = manifest["dependencies"]["llm-worker-guest"]["path"]
        .as_str()
        .expect("a path dependency");
    assert_eq!(Path::new(sdk), checkout.join("guest-sdk"));
    assert!(manifest.contains_key("workspace"), "a workspace of its own");
    let toolchain: toml::Table = toml::from_str(
        &std::fs::read_to_string(crate_dir.join("rust-toolchain.toml")).expect("read"),
    )
    .expect("rust-toolchain.toml is TOML");
    let pinned: toml::Table = toml::from_str(
        &std::fs::read_to_string(checkout.join("rust-toolchain.toml")).expect("read"),
    )
    .expect("TOML");
    assert_eq!(
        toolchain["toolchain"]["channel"], pinned["toolchain"]["channel"],
        "the checkout's Rust"
    );
    assert_eq!(
        toolchain["toolchain"]["targets"],
        toml::Value::Array(vec!["wasm32-wasip2".into()])
    );

    let target_dir = repo_root().join("plugins").join("target");
    let built = target_dir.join("wasm32-wasip2/release");
    // Whatever an earlier run built does not count.
    let _ = std::fs::remove_file(built.join("demo.wasm"));
    for args in [
        &["test"][..],
        &["build", "--release", "--target", "wasm32-wasip2"],
    ] {
        let output = authors_cargo(&crate_dir, &target_dir, args);
        assert!(output.status.success(), "cargo {args:?}: {}", err(&output));
        if args[0] == "test" {
            assert!(
                out(&output).contains("test tests::says_hello ... ok"),
                "{}",
                out(&output)
            );
        }
    }
    assert!(built.join("demo.wasm").is_file());

    let built_dir = built.to_str().expect("a UTF-8 path");
    let called = run_in(
        &crate_dir,
        &["call", built_dir, "hello", r#"{"name":"Ada"}"#],
        None,
    );
    assert!(called.status.success(), "{}", err(&called));
    assert_eq!(out(&called), "Hello, Ada!\n");
    let listed = run_in(&crate_dir, &["list", built_dir], None);
    assert!(
        out(&listed).contains("hello") && out(&listed).contains("demo.wasm"),
        "{}",
        out(&listed)
    );

    // `serve`, to an MCP client.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
        command
            .current_dir(&crate_dir)
            .args(["serve", built_dir])
            .env("XDG_CACHE_HOME", cache_home());
        let transport = rmcp::transport::TokioChildProcess::new(command).expect("spawn serve");
        let client = ().serve(transport).await.expect("initialize");
        let hello = client
            .call_tool(call("hello", json!({"name": "MCP"})))
            .await
            .expect("tools/call");
        assert_eq!(text(&hello), "Hello, MCP!");
        client.cancel().await.expect("close");
    });
}

#[test]
fn unknown_arguments_are_named() {
    let root = after_the_demo("unknown-arguments");
    for (tool, input, said) in [
        // A tool without arguments.
        (
            "count",
            r#"{"x":1}"#,
            r#"at /: unknown argument "x"; the tool takes none"#,
        ),
        (
            "greet",
            r#"{"name":"Ada","nmae":"Ada"}"#,
            r#"at /: unknown argument "nmae"; the tool takes "name""#,
        ),
    ] {
        let called = run_in(&root, &["call", "target/demo-plugins", tool, input], None);
        assert_eq!(called.status.code(), Some(1), "{tool}");
        assert!(err(&called).contains(said), "{tool}: {}", err(&called));
    }
}

#[test]
fn check_names_the_policy_it_read_and_the_stray_ones() {
    let root = after_the_demo("check-policies");
    let dir = root.join("target/demo-plugins");
    std::fs::write(dir.join("calc.policy.toml"), "[limits]\nmemory_mib = 32\n").expect("write");
    // A policy under the wrong name: greet runs with the defaults.
    std::fs::write(dir.join("greet.toml"), "[limits]\nmemory_mib = 8\n").expect("write");
    let checked = run_in(&root, &["check", "target/demo-plugins"], None);
    assert!(checked.status.success(), "{}", err(&checked));
    let report = out(&checked);
    let section = |file: &str| -> String {
        report
            .lines()
            .skip_while(|line| !line.starts_with(&format!("ok       {file}")))
            .take_while(|line| !line.starts_with("ok ") || line.contains(file))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        section("calc.wasm").contains("policy: calc.policy.toml"),
        "{report}"
    );
    assert!(
        section("greet.wasm").contains("no policy: the defaults (no greet.policy.toml beside it)"),
        "{report}"
    );
    assert!(
        report.contains("warning  target/demo-plugins/greet.toml is not read: the policy of"),
        "{report}"
    );
}

#[test]
fn check_fails_where_call_fails_on_a_directory_without_plugins() {
    let root = scratch_dir("check-empty");
    std::fs::create_dir_all(root.join("plugins")).expect("mkdir");
    let checked = run_in(&root, &["check", "plugins"], None);
    assert_eq!(checked.status.code(), Some(1), "{}", out(&checked));
    assert!(
        err(&checked).contains("error: plugins holds no plugins (no `.wasm` files"),
        "{}",
        err(&checked)
    );
    let called = run_in(&root, &["call", "plugins", "greet", "{}"], None);
    assert_eq!(called.status.code(), Some(1));
}

#[test]
fn an_empty_input_is_not_a_call_without_arguments() {
    let root = after_the_demo("empty-input");
    for stdin in ["", " \n"] {
        let called = run_in(
            &root,
            &["call", "target/demo-plugins", "count"],
            Some(stdin.as_bytes()),
        );
        assert_eq!(called.status.code(), Some(2), "{stdin:?}");
        assert_eq!(
            err(&called),
            "error: no input on stdin: give the arguments of 'count' as a JSON object, e.g. \
             '{}' for none\n"
        );
        assert!(out(&called).is_empty());
    }
    let called = run_in(&root, &["call", "target/demo-plugins", "count", ""], None);
    assert_eq!(called.status.code(), Some(2));
    assert!(
        err(&called).contains("the input is empty"),
        "{}",
        err(&called)
    );
    // `{}`, as the argument or on stdin, is a call without arguments.
    let called = run_in(&root, &["call", "target/demo-plugins", "count", "{}"], None);
    assert!(called.status.success(), "{}", err(&called));
    assert_eq!(out(&called), "0\n");
    let called = run_in(
        &root,
        &["call", "target/demo-plugins", "count"],
        Some(b"{}\n"),
    );
    assert!(called.status.success(), "{}", err(&called));
}

#[test]
fn the_help_lists_every_command_in_one_line_and_each_its_own_flags() {
    let root = scratch_dir("help");
    let help = |args: &[&str]| {
        let output = run_in(&root, args, None);
        assert!(output.status.success(), "{args:?}: {}", err(&output));
        out(&output)
    };
    let top = help(&["--help"]);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .collect();
    let names: Vec<&str> = commands
        .iter()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(
        names,
        [
            "list", "call", "check", "serve", "new", "lock", "pull", "push", "keygen", "schema",
            "help"
        ],
        "{top}"
    );
    for line in &commands {
        assert!(line.len() <= 100, "more than one line: {line:?}");
    }
    assert!(
        help(&["list", "--help"]).contains("Print a JSON array, one object per tool"),
        "what `list --json` prints"
    );
    // Each command shows the flags it uses: `lock` and `pull` start no instances (no
    // --pool) and read no lock as --locked would; `pull` reads no subdirectories.
    for (command, absent, present) in [
        (
            "lock",
            &["--pool", "--locked"][..],
            &["--fuel", "--recursive"][..],
        ),
        (
            "pull",
            &["--pool", "--locked", "--recursive", "--include-target"],
            &["--fuel"],
        ),
        (
            "list",
            &[],
            &["--pool", "--locked", "--recursive", "--fuel"],
        ),
        (
            "serve",
            &[],
            &["--pool", "--locked", "--recursive", "--fuel"],
        ),
    ] {
        let text = help(&[command, "--help"]);
        for flag in absent {
            assert!(
                !text.contains(flag),
                "{command} --help shows {flag}: {text}"
            );
        }
        for flag in present {
            assert!(text.contains(flag), "{command} --help lacks {flag}: {text}");
        }
    }
}
