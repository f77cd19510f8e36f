//! What goes through: a signed plugin pushed, pulled, locked and served; a moved tag followed
//! only on `pull --update`; an artifact pushed by the independent client.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use llm_worker_tests::plugin_path;

use super::{
    ACME_KEY, Registry, independent_client_installed, independent_push, lock_of, sha256_file,
    signed_by, source_of, text_of,
};
use crate::cli::{run, stderr, stdout};
use crate::mcp::{names, serve_watching};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_plugin_is_pushed_pulled_served_and_recorded_in_the_lock() {
    let Some(registry) = Registry::start("registry-round-trip") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    let pushed = registry.push("greet", "acme/greet:1.0", Some(&acme));
    assert!(pushed.contains("signed with sha256:"), "{pushed}");
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));

    let out = registry.pull("acme/greet:1.0", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("signed by acme"), "{}", stdout(&out));

    // The lock: the file's digest, the manifest, the layer and the signer.
    let lock = lock_of(&dir);
    assert_eq!(lock["version"].as_integer(), Some(2));
    // The first pull pins the trust policy it used, and says so.
    let pinned = lock["trust_sha256"].as_str().expect("trust_sha256");
    assert!(
        stdout(&out).contains(&format!(
            "approved: llm-worker.trust.toml: pinned as it stands (sha256 {pinned})"
        )),
        "{}",
        stdout(&out)
    );
    let source = source_of(&dir, "greet.wasm");
    let sha256 = sha256_file(&dir.join("greet.wasm"));
    assert_eq!(sha256, sha256_file(&plugin_path("greet")));
    assert_eq!(
        source["layer"].as_str(),
        Some(format!("sha256:{sha256}").as_str())
    );
    assert_eq!(source["signer"].as_str(), Some("acme"));
    assert_eq!(
        source["reference"].as_str(),
        Some(registry.reference("acme/greet:1.0").as_str())
    );
    assert!(
        source["manifest"]
            .as_str()
            .is_some_and(|m| m.starts_with("sha256:"))
    );

    // `check` says what was verified, and does not take the trust policy for a stray policy.
    let out = run(&registry.cache(), &["check", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(
        report.contains("verified: signed by acme (sha256:")
            && report.contains("still allowed by llm-worker.trust.toml"),
        "{report}"
    );
    let out = run(&registry.cache(), &["list", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("trust.toml"),
        "not a stray policy: {}",
        stderr(&out)
    );

    // Pulling again changes nothing; `lock` keeps the provenance.
    let out = registry.pull("acme/greet:1.0", &dir, &[]);
    assert!(stdout(&out).contains("up to date"), "{}", stdout(&out));
    // A file damaged since is not "up to date": it is pulled again from the same manifest.
    let greet = dir.join("greet.wasm");
    let bytes = std::fs::read(&greet).expect("the plugin");
    std::fs::write(&greet, b"damaged").expect("write");
    let out = registry.pull("acme/greet:1.0", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("restored"), "{}", stdout(&out));
    assert_eq!(std::fs::read(&greet).expect("the plugin"), bytes);
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&dir, "greet.wasm")["signer"].as_str(),
        Some("acme")
    );
    let out = run(&registry.cache(), &["lock", "--check", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stdout(&out));

    // Served over MCP, locked.
    assert_eq!(
        super::serve_and_greet(&registry, &dir, "registry").await,
        "Hello, registry!"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_changes_nothing_until_pull_update_and_watch_follows() {
    let Some(registry) = Registry::start("registry-moved-tag") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "acme/tool:stable", Some(&acme));
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("acme/tool:stable", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = source_of(&dir, "tool.wasm")["manifest"]
        .as_str()
        .expect("manifest")
        .to_owned();
    let (client, changes, _stderr) = serve_watching(&registry.cache(), &dir).await;
    assert_eq!(
        names(client.list_all_tools().await.expect("list")),
        ["greet"]
    );

    // The tag now names another component (signed by the same key): refused until --update.
    registry.push("counter", "acme/tool:stable", Some(&acme));
    let out = registry.pull("acme/tool:stable", &dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains(&first) && message.contains("pull --update"),
        "{message}"
    );
    assert_eq!(
        source_of(&dir, "tool.wasm")["manifest"].as_str(),
        Some(first.as_str())
    );
    assert_eq!(
        sha256_file(&dir.join("tool.wasm")),
        sha256_file(&plugin_path("greet"))
    );

    // The new version offers other tools: an update alone is refused, naming them, and
    // changes nothing; approved, it goes through.
    let out = registry.pull("acme/tool:stable", &dir, &["--update"]);
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains("tools: new: 'count', 'peek'; gone: 'greet'")
            && message.contains("--approve-names"),
        "{message}"
    );
    assert_eq!(
        sha256_file(&dir.join("tool.wasm")),
        sha256_file(&plugin_path("greet"))
    );
    // Not by the tag, which could name another version by the time it is approved.
    let out = registry.pull("acme/tool:stable", &dir, &["--update", "--approve-names"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("named by its digest"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        sha256_file(&dir.join("tool.wasm")),
        sha256_file(&plugin_path("greet"))
    );
    // Approved by the digest the refusal names (the version reviewed, wherever the tag is).
    let digest = message
        .split("acme/tool@")
        .nth(1)
        .and_then(|rest| rest.get(..71))
        .unwrap_or_else(|| panic!("a digest to approve: {message}"));
    let out = registry.pull(
        &format!("acme/tool@{digest}"),
        &dir,
        &["--name", "tool", "--update", "--approve-names"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("{first} ->")),
        "{}",
        stdout(&out)
    );
    assert_ne!(
        source_of(&dir, "tool.wasm")["manifest"].as_str(),
        Some(first.as_str())
    );

    // `serve --watch` picks the update up (the new file and the new lock, once both are there).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, changes.notified())
            .await
            .expect("notifications/tools/list_changed after pull --update");
        if names(client.list_all_tools().await.expect("list")) == ["count", "peek"] {
            break;
        }
    }
    client.cancel().await.expect("close");
}

/// `push` loads the plugin as every command that loads one does: under the loading options'
/// limits, and compiled into the cache, so that serving the file afterwards compiles nothing.
#[test]
fn a_push_loads_the_plugin_as_the_other_commands_do() {
    let Some(registry) = Registry::start("registry-push-loads") else {
        return;
    };
    let cache = registry.root.join("cache");
    let reference = registry.reference("loads/greet:1");
    let greet = plugin_path("greet");
    let push = ["push", text_of(&greet), &reference, "--plain-http"];
    // A limit the plugin cannot load under: refused, naming the plugin and the limit.
    let refused = run(
        &cache,
        &[&push[..], &["--no-cache", "--memory-mib", "1"]].concat(),
        None,
    );
    assert!(!refused.status.success(), "{}", stdout(&refused));
    let said = stderr(&refused);
    assert!(said.contains("greet") && said.contains("memory"), "{said}");
    let pushed = run(&cache, &push, None);
    assert!(pushed.status.success(), "{}", stderr(&pushed));
    let dir = registry.root.join("served");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(plugin_path("greet"), dir.join("greet.wasm")).expect("copy");
    let out = run(&cache, &["-v", "list", text_of(&dir)], None);
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert_eq!(log.matches("compiled cache hit").count(), 1, "{log}");
    assert_eq!(log.matches("compiled and cached").count(), 0, "{log}");
}

#[test]
fn an_artifact_pushed_by_an_independent_client_is_pulled_and_run() {
    let Some(registry) = Registry::start("registry-interop") else {
        return;
    };
    if !independent_client_installed() {
        return;
    }
    let acme = registry.key("acme", ACME_KEY);
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "tools/*", "\"acme\""));
    let digest = independent_push(
        &registry,
        "tools/calc",
        &plugin_path("calc"),
        &["--sign", text_of(&acme)],
    );
    let out = registry.pull("tools/calc:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&dir, "calc.wasm")["manifest"].as_str(),
        Some(digest.as_str())
    );
    let out = run(
        &registry.cache(),
        &["call", text_of(&dir), "add", r#"{"a":2,"b":3}"#],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "5.0");

    // And by digest, under another name (in another directory: one cannot serve the same
    // tools twice).
    let other = registry.plugin_dir("others", &signed_by(&registry, "tools/*", "\"acme\""));
    let out = registry.pull(
        &format!("tools/calc@{digest}"),
        &other,
        &["--name", "calc2"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A policy file that lay in the directory before the plugin was pulled is approved by the
/// first pull as it stands; the pull says so, as it does of the trust policy.
#[test]
fn a_first_pull_says_it_approved_the_policy_file_beside_the_plugin() {
    let Some(registry) = Registry::start("registry-policy-pinned") else {
        return;
    };
    let (rules, dir, policy) = greet_with_a_policy(&registry);
    let access = dir.join("llm-worker.access.toml");
    std::fs::write(&access, "[[grant]]\nwho = [\"*\"]\ntools = [\"*\"]\n").expect("access");
    let out = registry.pull("scratch/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let sha256 = sha256_file(&policy);
    let report = stdout(&out);
    let access_sha256 = sha256_file(&access);
    assert!(
        report.contains(&format!(
            "approved: llm-worker.access.toml: pinned as it stands (sha256 {access_sha256}) by \
             this first pull; review it"
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "approved: greet.policy.toml: pinned as it stands (sha256 {sha256}) by this first \
             pull; review it"
        )),
        "{report}"
    );
    let lock = lock_of(&dir);
    let entry = lock["plugin"]
        .as_array()
        .and_then(|plugins| plugins.first())
        .expect("an entry");
    assert_eq!(entry["policy_sha256"].as_str(), Some(sha256.as_str()));

    // The same tools under another name in the same directory: refused before anything is
    // written (a load would refuse both, and the approved plugin would go offline).
    let out = registry.pull("scratch/greet:1", &dir, &["--name", "twin"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("offers the tool 'greet', as greet.wasm in"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.join("twin.wasm").exists());
    assert_eq!(lock_of(&dir)["plugin"].as_array().map(Vec::len), Some(1));

    // Without a policy file nothing is approved but the plugin, and nothing is said of one.
    let dir = registry.plugin_dir("bare", &rules);
    let out = registry.pull("scratch/greet:1", &dir, &["--name", "bare"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("policy.toml"), "{}", stdout(&out));
    assert!(!stdout(&out).contains("access.toml"), "{}", stdout(&out));
}

/// A first pull approves the policy beside the plugin only if it is the operator's own, as
/// `lock` and a load without a lock require: one that others may write (a umask of 000, a
/// `chmod -R a+w`) could hold another user's grants, which the lock would pin.
#[test]
fn a_first_pull_refuses_a_policy_file_others_may_write() {
    use std::os::unix::fs::PermissionsExt;
    let Some(registry) = Registry::start("registry-policy-shared") else {
        return;
    };
    let (_, dir, policy) = greet_with_a_policy(&registry);
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = registry.pull("scratch/greet:1", &dir, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("greet.policy.toml"),
        "names the file: {}",
        stderr(&out)
    );
    assert!(!dir.join("greet.wasm").exists());
    assert!(!dir.join("llm-worker.lock").exists());

    // The operator's own again: pulled, and the policy pinned.
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = registry.pull("scratch/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("approved: greet.policy.toml"),
        "{}",
        stdout(&out)
    );
}

/// `pull` makes the plugin directory through no link that others could have put on the way
/// (here, one in a directory anyone may write): it is refused before anything is made where it
/// leads.
#[test]
fn pull_makes_no_directory_through_a_link_others_could_plant() {
    use std::os::unix::fs::PermissionsExt;
    let Some(registry) = Registry::start("registry-planted-link") else {
        return;
    };
    registry.push("greet", "scratch/greet:1", None);
    let root = registry.plugin_dir("root", "");
    let open = root.join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let target = root.join("target");
    std::fs::create_dir(&target).expect("mkdir");
    std::os::unix::fs::symlink(&target, open.join("link")).expect("symlink");
    let out = registry.pull("scratch/greet:1", &open.join("link/plugins"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot be made safely"),
        "{}",
        stderr(&out)
    );
    assert!(!target.join("plugins").exists(), "made where the link led");
}

/// `greet` pushed unsigned to `scratch/greet:1`, a plugin directory whose trust policy lets
/// `scratch/*` come unsigned, and a policy file written for `greet` in it: the rules, the
/// directory and the policy's path.
fn greet_with_a_policy(registry: &Registry) -> (String, PathBuf, PathBuf) {
    registry.push("greet", "scratch/greet:1", None);
    let rules = format!(
        "[[rule]]\nrepository = \"{}/scratch/*\"\nunsigned = true\n",
        registry.address
    );
    let dir = registry.plugin_dir("plugins", &rules);
    let policy = dir.join("greet.policy.toml");
    std::fs::write(&policy, "[env]\nset = { MODE = \"planted\" }\n").expect("policy");
    (rules, dir, policy)
}
