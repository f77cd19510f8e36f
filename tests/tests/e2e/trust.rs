//! Trusting a stranger's plugin: a lock file approving exact bytes, secrets the plugin never
//! holds, and HTTP grants narrowed per tool.

use std::path::Path;

use llm_worker::content::CompletionRef;
use llm_worker::lock::{LOCK_FILE, LockError, LockFile};
use llm_worker::*;
use llm_worker_tests::http_server::TestServer;
use llm_worker_tests::{ScratchDir, host, plugin_path, scratch_dir, session};
use serde_json::json;

/// A directory with the counter and greet plugins, and a policy for greet.
fn plugin_dir(name: &str) -> ScratchDir {
    let dir = scratch_dir(name);
    for plugin in ["counter", "greet"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    std::fs::write(
        dir.join("greet.policy.toml"),
        "[limits]\ntimeout_ms = 5000\n",
    )
    .expect("policy");
    dir
}

fn lock(dir: &Path) {
    llm_worker_tests::lock_dir(dir);
}

/// The lock the directory's plugins would get now (what `lock --check` compares).
fn lock_of_now(dir: &Path) -> LockFile {
    let loaded = host()
        .load_dir_with(
            dir,
            LoadDirOptions::default().ignore_lock(true),
            |_, _, _| {},
        )
        .expect("load");
    LockFile::of(dir, &loaded.plugins)
}

fn not_approved(loaded: &PluginDir, file: &str) -> String {
    loaded
        .failures
        .iter()
        .find(|failure| {
            matches!(failure, PluginError::NotApproved { .. })
                && failure.path().is_some_and(|p| p.ends_with(file))
        })
        .map(ToString::to_string)
        .unwrap_or_else(|| panic!("{file} is not refused: {:?}", loaded.failures))
}

#[test]
fn a_locked_directory_loads_only_what_was_approved() {
    let dir = plugin_dir("lock");
    // What a load says of the lock: none was there to apply.
    assert!(!host().load_dir(&dir).expect("load").locked);
    lock(&dir);
    let text = std::fs::read_to_string(dir.join(LOCK_FILE)).expect("lock file");
    assert!(
        text.contains("file = \"counter.wasm\"") && text.contains("tools = [\"greet\"]"),
        "{text}"
    );
    let loaded = host().load_dir(&dir).expect("load");
    assert_eq!(loaded.plugins.len(), 2, "{:?}", loaded.failures);
    assert!(loaded.locked);
    let ignoring = LoadDirOptions::default().ignore_lock(true);
    assert!(
        !host()
            .load_dir_with(&dir, ignoring, |_, _, _| {})
            .expect("load")
            .locked
    );

    // One byte changed in a plugin.
    let mut bytes = std::fs::read(dir.join("counter.wasm")).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(dir.join("counter.wasm"), &bytes).expect("write");
    // The policy changed.
    std::fs::write(
        dir.join("greet.policy.toml"),
        "[limits]\ntimeout_ms = 6000\n",
    )
    .expect("write");
    // A new plugin, not in the lock.
    std::fs::copy(plugin_path("calc"), dir.join("calc.wasm")).expect("copy");
    let loaded = host().load_dir(&dir).expect("load");
    assert!(loaded.plugins.is_empty());
    let counter = not_approved(&loaded, "counter.wasm");
    let lock_entry = LockFile::read(&dir).expect("read").expect("a lock");
    let old_hash = &lock_entry
        .plugins
        .iter()
        .find(|p| p.file == "counter.wasm")
        .expect("counter is locked")
        .sha256;
    assert!(
        counter.contains("changed since it was locked")
            && counter.contains(old_hash.as_str())
            && counter.contains("llm-worker lock"),
        "{counter}"
    );
    assert!(
        not_approved(&loaded, "greet.wasm").contains("policy"),
        "{loaded:?}"
    );
    assert!(not_approved(&loaded, "calc.wasm").contains("not in the lock"));

    // A locked plugin that is gone.
    std::fs::remove_file(dir.join("counter.wasm")).expect("remove");
    let loaded = host().load_dir(&dir).expect("load");
    assert!(not_approved(&loaded, "counter.wasm").contains("gone"));

    // The lock's differences, as `lock --check` prints them.
    let now = lock_of_now(&dir);
    let differences = lock_entry.differences(&now);
    assert_eq!(differences.len(), 3, "{differences:?}");
}

/// A server on 127.0.0.1 that answers "ok" and keeps the headers of every request.
/// A plugin whose bytes and policy are the approved ones but whose tools are not (it lists
/// other tools at another time, or at random: here the lock's list is made to differ, which is
/// the same to the check) is not approved: a tool of a new name would get the plugin's grants
/// without the `[tools.NAME]` narrowing the operator wrote for the tools they saw.
#[test]
fn a_plugin_offering_other_tools_than_approved_is_refused() {
    let dir = plugin_dir("lock-tools");
    lock(&dir);
    let path = dir.join(LOCK_FILE);
    let text = std::fs::read_to_string(&path).expect("lock file");
    assert!(text.contains("tools = [\"greet\"]"), "{text}");
    std::fs::write(
        &path,
        text.replace("tools = [\"greet\"]", "tools = [\"welcome\"]"),
    )
    .expect("write");
    let loaded = host().load_dir(&dir).expect("load");
    let greet = not_approved(&loaded, "greet.wasm");
    assert!(
        greet.contains("offers other tools than the lock approved")
            && greet.contains("new: 'greet'")
            && greet.contains("gone: 'welcome'")
            && greet.contains("llm-worker lock"),
        "{greet}"
    );
    assert_eq!(loaded.plugins.len(), 1, "{:?}", loaded.failures);
}

fn header_server() -> TestServer {
    TestServer::answering("ok")
}

fn fetcher_with(name: &str, policy: &str) -> Result<LoadedPlugin, PluginError> {
    // The plugin is read at load: its directory may go once it is loaded.
    let dir = scratch_dir(name);
    std::fs::copy(plugin_path("fetcher"), dir.join("fetcher.wasm")).expect("copy");
    std::fs::write(dir.join("fetcher.policy.toml"), policy).expect("policy");
    host().load(dir.join("fetcher.wasm"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_only_its_destination_and_never_the_plugin() {
    let (granted, other) = (header_server(), header_server());
    // The secret: a variable cargo sets for every test process (its package's name).
    let secret = std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME");
    let policy = format!(
        "[http]\nallow = [\"http://127.0.0.1:{a}\", \"http://127.0.0.1:{b}\"]\n\
         [[http.secrets]]\nhost = \"http://127.0.0.1:{a}\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{CARGO_PKG_NAME}}\"\n",
        a = granted.port(),
        b = other.port()
    );
    let plugin = fetcher_with("secret", &policy).unwrap_or_else(|e| panic!("{e}"));
    let debug = format!("{:?}", plugin.policy());
    assert!(!debug.contains(&secret), "redacted: {debug}");
    let tools = session(&plugin);
    let fetch = |url: String, authorization: Option<&str>| {
        let tools = tools.clone();
        let input = json!({"url": url, "authorization": authorization}).to_string();
        async move { tools.call_tool("fetch", &input).await }
    };
    let url = |port: u16| format!("http://127.0.0.1:{port}/");
    assert_eq!(
        fetch(url(granted.port()), None).await.as_deref(),
        Ok("200 ok")
    );
    // The plugin's own value is replaced, not sent beside the secret.
    assert_eq!(
        fetch(url(granted.port()), Some("Bearer forged"))
            .await
            .as_deref(),
        Ok("200 ok")
    );
    assert_eq!(
        fetch(url(other.port()), None).await.as_deref(),
        Ok("200 ok")
    );
    assert_eq!(
        granted.header("authorization"),
        [
            Some(format!("Bearer {secret}")),
            Some(format!("Bearer {secret}"))
        ]
    );
    assert_eq!(
        other.header("authorization"),
        [None],
        "not sent to another destination"
    );

    // A variable that is not set is a load error naming it.
    let missing = policy.replace("CARGO_PKG_NAME", "LLM_WORKER_TEST_UNSET_TOKEN");
    let error = fetcher_with("secret-missing", &missing).expect_err("refused");
    assert!(
        error.to_string().contains("LLM_WORKER_TEST_UNSET_TOKEN")
            && error.to_string().contains("http.secrets[0].value"),
        "{error}"
    );
    // A secret for a destination that is not granted.
    let stray = format!(
        "[http]\nallow = [\"http://127.0.0.1:{}\"]\n[[http.secrets]]\nhost = \"https://elsewhere.example\"\n\
         header = \"Authorization\"\nvalue = \"x\"\n",
        granted.port()
    );
    let error = fetcher_with("secret-stray", &stray).expect_err("refused");
    assert!(
        error.to_string().contains("http.secrets[0].host"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_without_the_grant_cannot_reach_the_host_its_sibling_can() {
    let (a, b) = (header_server(), header_server());
    // `fire` may reach B only; `fetch` has no list of its own: the plugin's, A and B.
    let policy = format!(
        "[http]\nallow = [\"http://127.0.0.1:{a}\", \"http://127.0.0.1:{b}\"]\n\
         [tools.fire.http]\nallow = [\"http://127.0.0.1:{b}\"]\n",
        a = a.port(),
        b = b.port()
    );
    let plugin = fetcher_with("per-tool", &policy).unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&plugin);
    let url = |port: u16| format!("http://127.0.0.1:{port}/");
    assert_eq!(
        tools
            .call_tool("fetch", &json!({"url": url(a.port())}).to_string())
            .await
            .as_deref(),
        Ok("200 ok"),
        "the sibling reaches A"
    );
    let fired = tools
        .call_tool(
            "fire",
            &json!({"url": url(a.port()), "count": 1}).to_string(),
        )
        .await;
    assert_eq!(fired.as_deref(), Ok("sent 1"));
    assert_eq!(
        tools.call_tool("outcomes", "{}").await.as_deref(),
        Ok("HttpRequestDenied"),
        "`fire` may not reach A"
    );
    assert_eq!(a.connections(), 1, "only `fetch` reached A");

    // A tool's list may not be wider than the plugin's.
    let wider = format!(
        "[http]\nallow = [\"http://127.0.0.1:{}\"]\n[tools.fetch.http]\nallow = [\"*.example.com\"]\n",
        a.port()
    );
    let error = fetcher_with("per-tool-wider", &wider).expect_err("refused");
    assert!(
        error.to_string().contains("tools.fetch.http.allow[0]")
            && error.to_string().contains("*.example.com"),
        "{error}"
    );
    let unknown = format!(
        "[http]\nallow = [\"http://127.0.0.1:{}\"]\n[tools.nope.http]\nallow = []\n",
        a.port()
    );
    let error = fetcher_with("per-tool-unknown", &unknown).expect_err("refused");
    assert!(error.to_string().contains("tools.nope"), "{error}");
}

/// A completion, a resource read and a prompt rendering of the fetcher, each fetching the
/// server at `port`: what each answered (the outcome, or the error's text).
async fn requests_reaching(session: &PluginSession, port: u16) -> [String; 3] {
    let completed = session
        .complete(
            CompletionRef::ResourceTemplate("fetched://local/{port}".into()),
            "port",
            &port.to_string(),
            &[],
        )
        .await
        .map(|completion| completion.values.join(" "));
    let read = session
        .read_resource(&format!("fetched://local/{port}"))
        .await
        .map(|contents| format!("{:?}", contents[0].data));
    let rendered = session
        .get_prompt(
            "show",
            &[("url".into(), format!("http://127.0.0.1:{port}/"))],
        )
        .await
        .map(|prompt| {
            let mut text = String::new();
            prompt.messages[0].content.write_text(&mut text);
            text
        });
    [completed, read, rendered].map(|answer| answer.unwrap_or_else(|error| error.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_other_than_tool_calls_get_no_http_unless_granted_their_own() {
    // The attack: `[http]` grants A (with a secret header) for tool `fetch` only; a client's
    // `completion/complete` — sent while its user types, no model or tool call involved — used
    // to reach A with the secret, and so did resource reads and prompt renderings.
    let a = header_server();
    let secret = std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME");
    let granted = format!(
        "[http]\nallow = [\"http://127.0.0.1:{a}\"]\n\
         [[http.secrets]]\nhost = \"http://127.0.0.1:{a}\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{CARGO_PKG_NAME}}\"\n\
         [tools.fetch.http]\nallow = [\"http://127.0.0.1:{a}\"]\n",
        a = a.port()
    );
    let plugin = fetcher_with("requests-http", &granted).unwrap_or_else(|e| panic!("{e}"));
    let session = plugin.open();
    let [completed, read, rendered] = requests_reaching(&session, a.port()).await;
    assert_eq!(
        completed, "HttpRequestDenied",
        "the completion reaches nothing"
    );
    assert!(read.contains("HttpRequestDenied"), "{read}");
    assert!(rendered.contains("HttpRequestDenied"), "{rendered}");
    assert_eq!(
        a.connections(),
        0,
        "no request reached A: {:?}",
        a.header("authorization")
    );
    // The tool still reaches A, with the secret.
    let mut worker = Worker::new();
    worker
        .register_tools(session.definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    let fetched = worker
        .tool_server_handle()
        .call_tool(
            "fetch",
            &json!({"url": format!("http://127.0.0.1:{}/", a.port())}).to_string(),
        )
        .await;
    assert_eq!(fetched.as_deref(), Ok("200 ok"));
    assert_eq!(
        a.header("authorization"),
        [Some(format!("Bearer {secret}"))]
    );

    // Granted on purpose, each kind of request reaches A (and its secret goes along).
    let b = header_server();
    let own = granted.replace(&a.port().to_string(), &b.port().to_string())
        + &format!(
            "[completion.http]\nallow = [\"http://127.0.0.1:{b}\"]\n\
             [resources.http]\nallow = [\"http://127.0.0.1:{b}\"]\n\
             [prompts.http]\nallow = [\"http://127.0.0.1:{b}\"]\n",
            b = b.port()
        );
    let plugin = fetcher_with("requests-http-granted", &own).unwrap_or_else(|e| panic!("{e}"));
    let [completed, read, rendered] = requests_reaching(&plugin.open(), b.port()).await;
    assert_eq!(completed, "200 ok");
    assert!(read.contains("200 ok"), "{read}");
    assert_eq!(rendered, "200 ok");
    assert_eq!(
        b.header("authorization"),
        vec![Some(format!("Bearer {secret}")); 3]
    );

    // Such a list may not be wider than the plugin's.
    let wider = format!(
        "[http]\nallow = [\"http://127.0.0.1:{}\"]\n[completion.http]\nallow = [\"*.example.com\"]\n",
        a.port()
    );
    let error = fetcher_with("requests-http-wider", &wider).expect_err("refused");
    assert!(
        error.to_string().contains("completion.http.allow[0]"),
        "{error}"
    );
}

fn lock_error(result: Result<PluginDir, PluginError>) -> LockError {
    match result {
        Err(PluginError::Lock(error)) => error,
        other => panic!("expected a lock error, got {other:?}"),
    }
}

/// The lock approves what a plugin offers besides tools, as it does tools: a plugin whose
/// resources, templates or prompts are not the ones approved (it lists others at another
/// time, or the lock predates their recording) is not loaded, and `lock --check` says why.
#[test]
fn a_locked_plugin_offering_other_resources_or_prompts_is_not_approved() {
    let dir = scratch_dir("lock-offers");
    std::fs::copy(plugin_path("notes"), dir.join("notes.wasm")).expect("copy");
    lock(&dir);
    let mut locked = LockFile::read(&dir).expect("read").expect("a lock");
    let offers = &locked.plugins[0].offers;
    assert!(
        offers.contains(&"resource notes://all".to_owned())
            && offers.contains(&"resource template notes://note/{number}".to_owned())
            && offers.iter().any(|offer| offer.starts_with("prompt ")),
        "{offers:?}"
    );
    assert_eq!(host().load_dir(&dir).expect("load").plugins.len(), 1);

    // The lock approved other offerings than the plugin has (here: one resource less).
    locked.plugins[0]
        .offers
        .retain(|offer| offer != "resource notes://all");
    locked.write(&dir).expect("write the lock");
    let loaded = host().load_dir(&dir).expect("load");
    assert!(loaded.plugins.is_empty());
    let refused = not_approved(&loaded, "notes.wasm");
    assert!(
        refused.contains("other resources, templates or prompts than the lock approved")
            && refused.contains("new: 'resource notes://all'")
            && refused.contains("llm-worker lock"),
        "{refused}"
    );
    let now = lock_of_now(&dir);
    assert_eq!(
        locked.differences(&now),
        vec![
            "notes.wasm: its resources, templates or prompts changed (new: 'resource \
             notes://all'; gone: none)"
                .to_owned()
        ]
    );
}

#[test]
fn a_directory_that_must_be_locked_loads_nothing_without_its_lock() {
    let dir = plugin_dir("locked-missing");
    let locked = LoadDirOptions::default().locked(true);
    // Never locked: `--locked` makes that an error, not "everything allowed".
    let error = lock_error(host().load_dir_with(&dir, locked, |_, _, _| {}));
    assert!(matches!(error, LockError::Missing { .. }), "{error}");
    assert!(error.to_string().contains("llm-worker lock"), "{error}");
    lock(&dir);
    let loaded = host()
        .load_dir_with(&dir, locked, |_, _, _| {})
        .expect("locked and approved");
    assert_eq!(loaded.plugins.len(), 2);
    // The attacker who swaps a plugin deletes the lock too: still nothing of theirs loads.
    std::fs::copy(plugin_path("calc"), dir.join("counter.wasm")).expect("swap");
    std::fs::remove_file(dir.join(LOCK_FILE)).expect("delete the lock");
    let error = lock_error(host().load_dir_with(&dir, locked, |_, _, _| {}));
    assert!(matches!(error, LockError::Missing { .. }), "{error}");
}

/// A trust policy beside the plugins says they are verified, which is done through the lock:
/// without one, every plugin loaded (a swapped, unsigned one too) as if there were no policy.
#[test]
fn a_directory_with_a_trust_policy_loads_nothing_without_its_lock() {
    let dir = plugin_dir("trust-without-lock");
    std::fs::write(
        dir.join(llm_worker::trust::TRUST_FILE),
        "[[rule]]\nrepository = \"localhost:5000/scratch/*\"\nunsigned = true\n",
    )
    .expect("write");
    let error = lock_error(host().load_dir(&dir));
    assert!(
        matches!(error, LockError::Missing { .. })
            && error
                .to_string()
                .contains("trust policy beside its plugins"),
        "{error}"
    );
    lock(&dir);
    let loaded = host().load_dir(&dir).expect("locked and approved");
    assert_eq!(loaded.plugins.len(), 2);
}

#[cfg(unix)]
#[test]
fn a_lock_file_others_could_have_written_is_not_trusted() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = plugin_dir("lock-untrusted");
    lock(&dir);
    let path = dir.join(LOCK_FILE);
    let approved = std::fs::read(&path).expect("read");

    // Writable by others.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let error = lock_error(host().load_dir(&dir));
    assert!(
        matches!(error, LockError::Untrusted { .. }) && error.to_string().contains("chmod go-w"),
        "{error}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");

    // A link to a lock file outside the directory (one that approves anything).
    let elsewhere = scratch_dir("lock-untrusted-elsewhere");
    std::fs::write(elsewhere.join(LOCK_FILE), &approved).expect("write");
    std::fs::remove_file(&path).expect("remove");
    symlink(elsewhere.join(LOCK_FILE), &path).expect("link");
    let error = lock_error(host().load_dir(&dir));
    assert!(
        error.to_string().contains("outside the plugin directory"),
        "{error}"
    );

    // A dangling link is not "no lock".
    std::fs::remove_file(&path).expect("remove");
    symlink(dir.join("gone.lock"), &path).expect("link");
    let error = lock_error(host().load_dir(&dir));
    assert!(matches!(error, LockError::Untrusted { .. }), "{error}");

    // Someone else's (root may hand a file to another user; others cannot).
    std::fs::remove_file(&path).expect("remove");
    std::fs::write(&path, &approved).expect("write");
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&path).expect("stat")) == 0;
    if root {
        std::os::unix::fs::chown(&path, Some(65534), None).expect("chown");
        let error = lock_error(host().load_dir(&dir));
        assert!(
            error.to_string().contains("belongs to user 65534"),
            "{error}"
        );
        std::os::unix::fs::chown(&path, Some(0), None).expect("chown");
    }
    assert_eq!(
        host().load_dir(&dir).expect("trusted again").plugins.len(),
        2
    );

    // In a directory others may write (not sticky), anyone could swap in an older lock of the
    // operator's or delete it: not trusted. Sticky (as /tmp), they could still put a lock, a
    // policy or a plugin there before the operator does: not trusted either. A sticky
    // directory above the plugin directory lets no one change what is in it: trusted.
    let mode = std::fs::metadata(&dir).expect("stat").permissions();
    for shared in [0o777, 0o1777] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(shared)).expect("chmod");
        let error = lock_error(host().load_dir(&dir));
        assert!(
            matches!(error, LockError::Untrusted { .. })
                && error
                    .to_string()
                    .contains("its directory may be written by other users")
                && error
                    .to_string()
                    .contains(&format!("chmod go-w {}", dir.display())),
            "{shared:o}: {error}"
        );
    }
    let inner = dir.join("inner");
    std::fs::create_dir(&inner).expect("mkdir");
    for file in ["counter.wasm", "greet.wasm", "greet.policy.toml"] {
        std::fs::copy(dir.join(file), inner.join(file)).expect("copy");
    }
    lock(&inner);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    assert_eq!(
        host().load_dir(&inner).expect("sticky above").plugins.len(),
        2
    );
    // Reached through a link in that sticky directory: trusted while the link is ours; not
    // when it is another user's, who could point it at another directory of ours later.
    let link = dir.join("link");
    symlink(&inner, &link).expect("link");
    assert_eq!(host().load_dir(&link).expect("our link").plugins.len(), 2);
    if root {
        std::os::unix::fs::lchown(&link, Some(65534), None).expect("lchown");
        let error = lock_error(host().load_dir(&link));
        assert!(
            matches!(error, LockError::Untrusted { .. })
                && error
                    .to_string()
                    .contains("is a link belonging to user 65534"),
            "{error}"
        );
    }
    std::fs::set_permissions(&dir, mode).expect("chmod");
}

/// Without a lock, whatever is in a directory runs: one that other users may write let them
/// drop in a plugin and a policy granting what they chose (or delete the lock there), for the
/// operator to run. Refused, as a lock in it would be.
#[cfg(unix)]
#[test]
fn a_directory_others_may_write_loads_nothing_without_a_lock() {
    use std::os::unix::fs::PermissionsExt;
    let dir = plugin_dir("unlocked-shared");
    let mode = std::fs::metadata(&dir).expect("stat").permissions();
    // Writable by its group when the group is others' (Debian's `nogroup` is the primary group
    // of `nobody` and others; only root can give a directory to it), or shared with the
    // set-group-ID bit (as a team directory, or a Kubernetes `fsGroup` volume). A group of the
    // user's alone (Debian's and Ubuntu's user private groups, umask 002) is not others.
    let group_of_others = std::os::unix::fs::chown(&dir, None, Some(65534)).is_ok();
    let modes: &[u32] = if group_of_others {
        &[0o777, 0o1777, 0o2775, 0o775]
    } else {
        &[0o777, 0o1777, 0o2775]
    };
    for &shared in modes {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(shared)).expect("chmod");
        let loaded = host().load_dir(&dir).expect("the directory is read");
        assert!(loaded.plugins.is_empty(), "{shared:o}");
        assert_eq!(
            loaded.failures.len(),
            2,
            "{shared:o}: {:?}",
            loaded.failures
        );
        for failure in &loaded.failures {
            assert!(
                matches!(failure, PluginError::SharedDirectory { .. })
                    && failure
                        .to_string()
                        .contains("may be written by other users")
                    && failure.to_string().contains("chmod go-w"),
                "{shared:o}: {failure}"
            );
        }
        // One file of it, loaded alone (its policy beside it is as open to others).
        let Err(error) = host().load(dir.join("greet.wasm")) else {
            panic!("{shared:o}: greet.wasm was loaded");
        };
        assert!(
            matches!(error, PluginError::SharedDirectory { .. })
                && error.to_string().contains("greet.wasm"),
            "{error}"
        );
    }
    std::fs::set_permissions(&dir, mode).expect("chmod");
    assert_eq!(host().load_dir(&dir).expect("load").plugins.len(), 2);
    // What is not a regular file when checked (a FIFO, or nothing) in a directory others may
    // write is refused too: they could make it a plugin between the check and the read.
    let swapped = scratch_dir("unlocked-shared-fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(swapped.join("evil.wasm"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    std::fs::set_permissions(&swapped, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let Err(error) = host().load(swapped.join("evil.wasm")) else {
        panic!("a FIFO was loaded");
    };
    assert!(
        matches!(error, PluginError::SharedDirectory { .. }),
        "{error}"
    );
    // A build's `target/wasm32-wasip2/release` others may write: every directory on the way
    // that needs it is named in one `chmod`.
    let nested = scratch_dir("unlocked-shared-nested");
    let release = nested.join("target/wasm32-wasip2/release");
    std::fs::create_dir_all(&release).expect("mkdir");
    std::fs::copy(plugin_path("greet"), release.join("greet.wasm")).expect("copy");
    for dir in [
        "target",
        "target/wasm32-wasip2",
        "target/wasm32-wasip2/release",
    ] {
        std::fs::set_permissions(nested.join(dir), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
    }
    let Err(error) = host().load(release.join("greet.wasm")) else {
        panic!("loaded from a group-writable build directory");
    };
    let all = format!(
        "chmod go-w {} {} {}",
        release.display(),
        nested.join("target/wasm32-wasip2").display(),
        nested.join("target").display()
    );
    assert!(error.to_string().contains(&all), "{error}");
    // In a private directory, a plugin file or a policy file others may write.
    for file in ["greet.wasm", "greet.policy.toml"] {
        let path = dir.join(file);
        let before = std::fs::metadata(&path).expect("stat").permissions();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let Err(error) = host().load(dir.join("greet.wasm")) else {
            panic!("greet.wasm was loaded with {file} writable by others");
        };
        assert!(
            matches!(error, PluginError::SharedDirectory { .. })
                && error.to_string().contains(file)
                && error.to_string().contains("chmod go-w"),
            "{file}: {error}"
        );
        std::fs::set_permissions(&path, before).expect("chmod");
    }
    // Reached through a link of ours held in a directory others may write (one they could
    // swap for another link of ours, leading elsewhere).
    let open = scratch_dir("unlocked-shared-links");
    let shared = open.join("team");
    std::fs::create_dir(&shared).expect("mkdir");
    std::os::unix::fs::symlink(&dir, shared.join("current")).expect("link");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let mine = open.join("mine");
    std::fs::create_dir(&mine).expect("mkdir");
    std::os::unix::fs::symlink(shared.join("current/greet.wasm"), mine.join("greet.wasm"))
        .expect("link");
    let Err(error) = host().load(mine.join("greet.wasm")) else {
        panic!("loaded through a link in a directory others may write");
    };
    assert!(
        matches!(error, PluginError::SharedDirectory { .. })
            && error.to_string().contains("holding the link"),
        "{error}"
    );
}

#[cfg(unix)]
#[test]
fn a_configmap_mount_of_links_inside_the_directory_is_trusted() {
    use std::os::unix::fs::symlink;
    // Kubernetes mounts a ConfigMap as links into `..data`, itself a link to a timestamped
    // directory, all inside the mount.
    let source = plugin_dir("configmap-source");
    lock(&source);
    let dir = scratch_dir("configmap");
    let versioned = dir.join("..2026_11_30_12_00_00.000000001");
    std::fs::create_dir(&versioned).expect("mkdir");
    for file in ["counter.wasm", "greet.wasm", "greet.policy.toml", LOCK_FILE] {
        std::fs::copy(source.join(file), versioned.join(file)).expect("copy");
    }
    symlink(versioned.file_name().expect("name"), dir.join("..data")).expect("link");
    for file in ["counter.wasm", "greet.wasm", "greet.policy.toml", LOCK_FILE] {
        symlink(format!("..data/{file}"), dir.join(file)).expect("link");
    }
    let loaded = host().load_dir(&dir).expect("load");
    assert!(loaded.failures.is_empty(), "{:?}", loaded.failures);
    assert_eq!(loaded.plugins.len(), 2);
}

#[cfg(unix)]
#[test]
fn writing_the_lock_replaces_a_planted_link_instead_of_following_it() {
    let dir = plugin_dir("lock-planted-link");
    let home = scratch_dir("lock-planted-victim");
    let victim = home.join("authorized_keys");
    std::fs::write(&victim, "ssh-ed25519 AAAA the operator's key\n").expect("victim");
    std::os::unix::fs::symlink(&victim, dir.join(LOCK_FILE)).expect("plant");
    let loaded = host()
        .load_dir_with(
            &dir,
            LoadDirOptions::default().ignore_lock(true),
            |_, _, _| {},
        )
        .expect("load");
    LockFile::of(&dir, &loaded.plugins)
        .write(&dir)
        .expect("write the lock");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "ssh-ed25519 AAAA the operator's key\n",
        "the file the link led to is untouched"
    );
    let written = std::fs::symlink_metadata(dir.join(LOCK_FILE)).expect("lock");
    assert!(
        written.file_type().is_file(),
        "the link was replaced by the lock"
    );
    assert_eq!(host().load_dir(&dir).expect("load").plugins.len(), 2);
    // No temporary file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("list")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[cfg(unix)]
#[test]
fn a_directory_grant_that_now_leads_elsewhere_is_not_approved() {
    let dir = plugin_dir("lock-grant-moved");
    let data = dir.join("data");
    std::fs::create_dir(&data).expect("mkdir");
    let policy = format!(
        "[[dirs]]\nhost = {:?}\nguest = \"/data\"\n",
        data.canonicalize()
            .expect("real path")
            .display()
            .to_string()
    );
    std::fs::write(dir.join("greet.policy.toml"), &policy).expect("policy");
    lock(&dir);
    let text = std::fs::read_to_string(dir.join(LOCK_FILE)).expect("lock");
    assert!(
        text.contains("dirs = ["),
        "the lock pins where the grant leads: {text}"
    );
    assert_eq!(host().load_dir(&dir).expect("load").plugins.len(), 2);

    // The policy's text is unchanged; `data` is replaced by a link to the operator's secrets.
    let secrets = scratch_dir("lock-grant-moved-ssh");
    std::fs::write(secrets.join("id_ed25519"), "PRIVATE KEY").expect("secret");
    std::fs::remove_dir(&data).expect("rmdir");
    std::os::unix::fs::symlink(&secrets, &data).expect("link");
    let loaded = host().load_dir(&dir).expect("load");
    let message = not_approved(&loaded, "greet.wasm");
    assert!(
        message.contains("directory grants lead to")
            && message.contains(&secrets.canonicalize().expect("real").display().to_string()),
        "{message}"
    );
    assert_eq!(loaded.plugins.len(), 1, "counter still loads");
}

#[test]
fn listing_a_plugins_tools_gives_it_none_of_its_grants() {
    // The slow starter spins in its start code as soon as it sees any environment variable:
    // loading it (which lists its tools) with a policy granting one must still be quick and
    // succeed, which it does only if the listing ran without the grant.
    let dir = scratch_dir("probe-without-grants");
    std::fs::write(
        dir.join("slow.wasm"),
        llm_worker_tests::wat::start_gated_on_environment(),
    )
    .expect("write");
    std::fs::write(
        dir.join("slow.policy.toml"),
        "[env]\nset = { API_KEY = \"granted\" }\n\n[limits]\ntimeout_ms = 2000\n",
    )
    .expect("policy");
    let plugin = host()
        .load(dir.join("slow.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plugin.tool_names(), ["slow"]);
    assert_eq!(
        plugin.policy().env.len(),
        1,
        "the grant is kept for the tool's calls"
    );
}
