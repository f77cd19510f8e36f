//! What stops a pulled plugin later: its signer's key revoked (on load, by `lock`, while
//! serving under `--watch`) and a policy edited after the lock was written.

use std::path::Path;
use std::time::{Duration, Instant};

use llm_worker_tests::plugin_path;

use super::{ACME_KEY, Registry, sha256_file, signed_by, text_of, write_trust};
use crate::cli::{run, stderr, stdout};
use crate::mcp::{names, serve_watching};

#[test]
fn a_revoked_key_stops_loading() {
    let Some(registry) = Registry::start("registry-revoked") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "acme/greet:1", Some(&acme));
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let call = |cache: &Path| {
        run(
            cache,
            &["call", text_of(&dir), "greet", r#"{"name":"x"}"#],
            None,
        )
    };
    assert!(call(&registry.cache()).status.success());

    // acme's key is taken out of the rule: greet stops loading, saying whose key it was.
    write_trust(&dir, &signed_by(&registry, "acme/*", "\"other\""));
    let out = call(&registry.cache());
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains("signer 'acme'") && message.contains("no longer trusted"),
        "{message}"
    );
    // ... and `lock` does not approve it again.
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no longer trusted"),
        "{}",
        stderr(&out)
    );

    // A trust policy edited without a new lock is not used either.
    write_trust(
        &dir,
        &format!("{}# edited\n", signed_by(&registry, "acme/*", "\"acme\"")),
    );
    let out = call(&registry.cache());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("changed since it was locked"),
        "{}",
        stderr(&out)
    );
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    // Approved, and said so: the operator sees that the trust policy itself was re-pinned.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("approved: llm-worker.trust.toml: changed (sha256 "),
        "{said}"
    );
    assert!(call(&registry.cache()).status.success());
}

/// `pull --update` approves new bytes, never a policy edited since the lock was written.
#[test]
fn pull_update_never_approves_a_policy_nobody_reviewed() {
    let Some(registry) = Registry::start("registry-policy-edit") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "acme/tool:stable", Some(&acme));
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("acme/tool:stable", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));

    std::fs::write(
        dir.join("tool.policy.toml"),
        "[env]\nset = { MODE = \"edited\" }\n",
    )
    .expect("edit the policy");
    registry.push("counter", "acme/tool:stable", Some(&acme));
    let out = registry.pull("acme/tool:stable", &dir, &["--update"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let message = stderr(&out);
    assert!(
        message.contains("changed since it was locked") && message.contains("llm-worker lock"),
        "{message}"
    );
    // Nothing moved: the approved bytes stay, and no temporary file is left behind.
    assert_eq!(
        sha256_file(&dir.join("tool.wasm")),
        sha256_file(&plugin_path("greet"))
    );
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".pulling"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// `pull --update` never hands a plugin's approved policy to another repository's code (a
/// "we moved" pull naming another publisher, whose artifact no rule covers, under the same
/// name).
#[test]
fn pull_update_refuses_another_repository_under_the_same_name() {
    let Some(registry) = Registry::start("registry-other-repository") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "acme/tool:stable", Some(&acme));
    registry.push("counter", "mallory/tool:stable", None);
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("acme/tool:stable", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(
        dir.join("tool.policy.toml"),
        "[env]\nset = { KEY = \"acme's\" }\n",
    )
    .expect("write the policy");
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let lock_before = std::fs::read(dir.join("llm-worker.lock")).expect("lock");

    let out = registry.pull(
        "mallory/tool:stable",
        &dir,
        &["--update", "--allow-unsigned", "--name", "tool"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let message = stderr(&out);
    assert!(
        message.contains("another repository") && message.contains("--name"),
        "{message}"
    );
    assert_eq!(
        sha256_file(&dir.join("tool.wasm")),
        sha256_file(&plugin_path("greet"))
    );
    assert_eq!(
        std::fs::read(dir.join("llm-worker.lock")).expect("lock"),
        lock_before
    );
}

/// A key revoked while `serve --watch` serves a plugin it signed: the plugin stops being
/// served (a running server is no exception to "a revoked key stops loading").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_while_serving_stops_the_plugin_under_watch() {
    let Some(registry) = Registry::start("registry-revoked-watch") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "acme/greet:1", Some(&acme));
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (client, changes, _stderr) = serve_watching(&registry.cache(), &dir).await;
    assert_eq!(
        names(client.list_all_tools().await.expect("list")),
        ["greet"]
    );

    // Only the trust policy changes: acme's key is taken out of the rule.
    write_trust(&dir, &signed_by(&registry, "acme/*", "\"other\""));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, changes.notified())
            .await
            .expect("notifications/tools/list_changed after the key was revoked");
        if names(client.list_all_tools().await.expect("list")).is_empty() {
            break;
        }
    }
    client.cancel().await.expect("close");
}
