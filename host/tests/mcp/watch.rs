//! Following a plugin directory: the watcher rescans it (or follows its lock) one rescan at a
//! time, and a changed secret is a new revision.

use llm_worker::mcp::{DirWatcher, ToolGroup};
use llm_worker_tests::logs::logged;

/// The file names of the plugins `watcher` serves.
fn served(watcher: &DirWatcher) -> Vec<String> {
    watcher
        .groups()
        .iter()
        .filter_map(|group| {
            std::path::Path::new(group.name())
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .collect()
}

/// A scratch directory named after `name` holding `plugins` (each as `NAME.wasm`).
fn dir_with(name: &str, plugins: &[&str]) -> llm_worker_tests::ScratchDir {
    let dir = llm_worker_tests::scratch_dir(name);
    for plugin in plugins {
        std::fs::copy(
            llm_worker_tests::plugin_path(plugin),
            dir.join(format!("{plugin}.wasm")),
        )
        .expect("copy");
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dir_watcher_follows_the_directory_one_rescan_at_a_time() {
    let dir = llm_worker_tests::scratch_dir("dir-watcher");
    let copy = |plugin: &str, name: &str| {
        std::fs::copy(llm_worker_tests::plugin_path(plugin), dir.join(name)).expect("copy");
    };
    copy("counter", "counter.wasm");
    let host = llm_worker_tests::host().clone();
    let mut watcher =
        DirWatcher::load(host, dir.path(), llm_worker::LoadDirOptions::default()).expect("load");
    assert_eq!(served(&watcher), ["counter.wasm"]);
    // Nothing changed: nothing is reloaded (the watcher says nothing).
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed && said.is_empty(), "{said:?}");

    copy("greet", "greet.wasm");
    assert!(watcher.rescan().await, "a plugin added");
    assert_eq!(served(&watcher), ["counter.wasm", "greet.wasm"]);
    let revision = watcher.groups()[1].revision();

    // A broken new version: looked at (the watcher says what it found), refused, the
    // working one kept.
    std::fs::write(dir.join("greet.wasm"), b"broken").expect("break");
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed, "the served plugins did not change");
    assert!(
        said.iter()
            .any(|line| line.starts_with("WARN") && line.contains("not a WebAssembly file")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|line| line.contains("the served plugins are unchanged")),
        "{said:?}"
    );
    assert_eq!(watcher.groups()[1].revision(), revision);

    // The same bytes again (a new modification time): reloaded, and no change either.
    copy("greet", "greet.wasm");
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed);
    assert!(
        said.iter()
            .any(|line| line.contains("the served plugins are unchanged")),
        "{said:?}"
    );
    assert_eq!(watcher.groups()[1].revision(), revision);

    std::fs::remove_file(dir.join("counter.wasm")).expect("remove");
    assert!(watcher.rescan().await, "a plugin removed");
    assert_eq!(served(&watcher), ["greet.wasm"]);
}

#[test]
fn a_changed_secret_is_a_new_revision() {
    use llm_worker::{HttpGrant, HttpSecret, Limits, SandboxPolicy};
    let with_secret = |value: &str| {
        let grant = HttpGrant::parse("https://api.example.com").expect("rule");
        let mut policy = SandboxPolicy::with_limits(Limits::default());
        policy.http.push(grant.clone());
        policy
            .http_secrets
            .push(HttpSecret::new(grant, "Authorization", value));
        let plugin = llm_worker_tests::host()
            .load_with_policy(llm_worker_tests::plugin_path("fetcher"), policy)
            .expect("load");
        ToolGroup::plugin(&plugin).revision()
    };
    let first = with_secret("Bearer one");
    assert_eq!(
        first,
        with_secret("Bearer one"),
        "the same plugin and policy"
    );
    assert_ne!(
        first,
        with_secret("Bearer two"),
        "a session must not keep an instance sending the old secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dir_watcher_follows_the_lock_once_there_is_one() {
    use llm_worker::LoadDirOptions;
    use llm_worker::lock::LockFile;
    let dir = dir_with("dir-watcher-lock", &["counter", "greet"]);
    let host = llm_worker_tests::host().clone();
    let mut watcher =
        DirWatcher::load(host.clone(), dir.path(), LoadDirOptions::default()).expect("load");
    assert!(!watcher.options().locked, "no lock yet");
    let lock_with = |plugins: &[&str]| {
        let loaded = host
            .load_dir_with(
                &dir,
                LoadDirOptions::default().ignore_lock(true),
                |_, _, _| {},
            )
            .expect("load");
        let approved: Vec<_> = loaded
            .plugins
            .into_iter()
            .filter(|plugin| plugins.contains(&plugin.name()))
            .collect();
        LockFile::of(&dir, &approved).write(&dir).expect("lock");
    };

    // Locked while serving: from now on the directory stays locked.
    lock_with(&["counter", "greet"]);
    watcher.rescan().await;
    assert!(watcher.options().locked, "locked since");
    assert_eq!(served(&watcher), ["counter.wasm", "greet.wasm"]);

    // The operator withdraws greet's approval; its file stays: it is no longer served.
    lock_with(&["counter"]);
    assert!(watcher.rescan().await);
    assert_eq!(served(&watcher), ["counter.wasm"]);

    // The lock is deleted and a plugin dropped in: the reload is refused (the watcher says
    // so), and nothing of it is served.
    std::fs::remove_file(dir.join(llm_worker::lock::LOCK_FILE)).expect("delete the lock");
    std::fs::copy(llm_worker_tests::plugin_path("calc"), dir.join("calc.wasm")).expect("copy");
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed);
    assert!(
        said.iter()
            .any(|line| line.contains("still serving the plugins loaded before")),
        "{said:?}"
    );
    assert_eq!(served(&watcher), ["counter.wasm"]);
}

/// A plugin whose policy changed and no longer loads with it is not kept under the policy it
/// was served with: here the operator takes away its HTTP grant (the plugin, which imports
/// `wasi:http`, is refused without one), and it is no longer served; a broken new version of
/// the plugin itself still keeps the working one serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_grant_is_not_kept_by_a_plugin_that_no_longer_loads() {
    let dir = llm_worker_tests::scratch_dir("dir-watcher-policy");
    for plugin in ["waiter", "counter"] {
        std::fs::copy(
            llm_worker_tests::plugin_path(plugin),
            dir.join(format!("{plugin}.wasm")),
        )
        .expect("copy");
    }
    let policy = dir.join("waiter.policy.toml");
    std::fs::write(&policy, "[http]\nallow = [\"http://127.0.0.1:9\"]\n").expect("policy");
    let host = llm_worker_tests::host().clone();
    let mut watcher =
        DirWatcher::load(host, dir.path(), llm_worker::LoadDirOptions::default()).expect("load");
    assert_eq!(served(&watcher), ["counter.wasm", "waiter.wasm"]);

    // A new version of counter that does not load: the working one keeps serving.
    std::fs::write(dir.join("counter.wasm"), b"broken").expect("break");
    watcher.rescan().await;
    assert_eq!(served(&watcher), ["counter.wasm", "waiter.wasm"]);

    // The grant taken away: waiter no longer loads, and is no longer served (the watcher says
    // why).
    std::fs::remove_file(&policy).expect("remove the policy");
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(changed, "{said:?}");
    assert_eq!(served(&watcher), ["counter.wasm"]);
    assert!(
        said.iter()
            .any(|line| line.contains("waiter.wasm is no longer served")
                && line.contains("its policy changed")),
        "{said:?}"
    );
}

/// A plugin refused for offering what a served one offers could take the served one's names:
/// a rescan where the served plugin's new version failed to load (an update caught half
/// written) saw no clash, served the newcomer too, and the catalog then gave the tools to
/// whichever name sorts first — the newcomer's, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_never_takes_a_served_plugins_names() {
    let dir = llm_worker_tests::scratch_dir("dir-watcher-clash");
    let counter = llm_worker_tests::plugin_path("counter");
    std::fs::copy(&counter, dir.join("zeta.wasm")).expect("copy");
    let host = llm_worker_tests::host().clone();
    let mut watcher =
        DirWatcher::load(host, dir.path(), llm_worker::LoadDirOptions::default()).expect("load");
    assert_eq!(served(&watcher), ["zeta.wasm"]);
    // In one rescan: zeta's update is half written, and alpha (offering zeta's tools) comes.
    std::fs::write(dir.join("zeta.wasm"), b"\0asm half written").expect("write");
    std::fs::copy(&counter, dir.join("alpha.wasm")).expect("copy");
    let (_, said) = logged(watcher.rescan()).await;
    assert_eq!(served(&watcher), ["zeta.wasm"], "{said:?}");
    assert!(
        said.iter()
            .any(|line| line.contains("alpha.wasm is not served: its tool")
                && line.contains("zeta.wasm already")),
        "{said:?}"
    );
    // zeta's update completes: the fresh load sees the clash; the served one keeps serving.
    std::fs::copy(&counter, dir.join("zeta.wasm")).expect("copy");
    watcher.rescan().await;
    assert_eq!(served(&watcher), ["zeta.wasm"]);
}

/// A newcomer whose read-write grant holds the way to a served plugin's grant could put a
/// link there, which the next load would grant the served one: the newcomer is not served, the
/// served one keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_cannot_take_the_way_to_a_served_plugins_grant() {
    let root = llm_worker_tests::scratch_dir("dir-watcher-grant-way");
    let dir = root.join("plugins");
    for made in ["plugins", "shared", "shared/docs"] {
        std::fs::create_dir(root.join(made)).expect("mkdir");
    }
    let add = |plugin: &str, host: &str, mode: &str| {
        std::fs::write(
            dir.join(format!("{plugin}.policy.toml")),
            format!("[[dirs]]\nhost = \"{host}\"\nguest = \"/data\"\nmode = \"{mode}\"\n"),
        )
        .expect("policy");
        std::fs::copy(
            llm_worker_tests::plugin_path(plugin),
            dir.join(format!("{plugin}.wasm")),
        )
        .expect("copy");
    };
    add("counter", "../shared/docs", "ro");
    let host = llm_worker_tests::host().clone();
    let mut watcher =
        DirWatcher::load(host, &dir, llm_worker::LoadDirOptions::default()).expect("load");
    assert_eq!(served(&watcher), ["counter.wasm"]);
    add("greet", "../shared", "rw");
    let (_, said) = logged(watcher.rescan()).await;
    assert_eq!(served(&watcher), ["counter.wasm"], "{said:?}");
    assert!(
        said.iter()
            .any(|line| line.contains("greet.wasm is not served")
                && line.contains("counter.wasm's grant dirs[0].host")
                && line.contains("read-write")),
        "{said:?}"
    );
}

/// A FIFO planted as the trust policy (in a shared sticky directory, or by a plugin that may
/// write the directory): looking for the trusted root it names opened it blocking, so `serve`
/// hung at its start and the watcher at its next rescan.
#[cfg(unix)]
#[test]
fn a_fifo_named_as_the_trust_policy_blocks_nothing() {
    let dir = llm_worker_tests::scratch_dir("dir-watcher-fifo");
    std::fs::copy(
        llm_worker_tests::plugin_path("counter"),
        dir.join("counter.wasm"),
    )
    .expect("copy");
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join(llm_worker::trust::TRUST_FILE))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let path = dir.path().to_owned();
    let (done, finished) = std::sync::mpsc::channel();
    // A thread of its own: one blocked for good must not hold the test's end.
    std::thread::spawn(move || {
        let _ = llm_worker::mcp::DirSnapshot::take(&path, llm_worker::LoadDirOptions::default());
        let _ = done.send(());
    });
    assert!(
        finished
            .recv_timeout(std::time::Duration::from_secs(30))
            .is_ok(),
        "taking a snapshot blocked on the FIFO"
    );
}

/// One subdirectory that cannot be read (here: its path is longer than the system takes)
/// failed the whole load of a recursive directory: `serve` did not start, and under `--watch`
/// every reload was refused, so a plugin removed (or withdrawn from the lock) kept serving.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subdirectory_that_cannot_be_read_holds_no_reload_back() {
    let dir = dir_with("dir-watcher-unreadable", &["counter", "greet"]);
    // Directories nested deeper than PATH_MAX (made one level at a time, from inside).
    {
        use rustix::fs::{Mode, OFlags};
        let name = "d".repeat(200);
        let mut at = rustix::fs::open(dir.path(), OFlags::DIRECTORY, Mode::empty()).expect("open");
        for _ in 0..24 {
            rustix::fs::mkdirat(&at, name.as_str(), Mode::from_raw_mode(0o755)).expect("mkdir");
            at = rustix::fs::openat(&at, name.as_str(), OFlags::DIRECTORY, Mode::empty())
                .expect("open");
        }
    }
    let host = llm_worker_tests::host().clone();
    let options = llm_worker::LoadDirOptions::default().recursive(true);
    let mut watcher = DirWatcher::load(host, dir.path(), options).expect("loads what it can read");
    assert_eq!(served(&watcher), ["counter.wasm", "greet.wasm"]);
    std::fs::remove_file(dir.join("counter.wasm")).expect("remove");
    assert!(watcher.rescan().await, "the removal is seen");
    assert_eq!(served(&watcher), ["greet.wasm"]);
}

/// A directory is listed on every rescan: one of more entries than the cap is refused, saying
/// why, rather than listed every 300 ms.
#[test]
fn a_directory_of_more_entries_than_the_cap_is_refused_saying_so() {
    let dir = llm_worker_tests::scratch_dir("dir-too-many-entries");
    for index in 0..=10_000 {
        std::fs::File::create(dir.join(format!("f{index}"))).expect("create");
    }
    let error = llm_worker_tests::host()
        .load_dir(dir.path())
        .expect_err("too many entries")
        .to_string();
    assert!(error.contains("more than 10000 entries"), "{error}");
}

/// A directory named after `name` holding greet and counter, greet granted its `conf`
/// subdirectory read-write, and a watcher serving both: the directory, `conf`, the watcher.
#[cfg(unix)]
fn greet_granted_conf_read_write(
    name: &str,
) -> (llm_worker_tests::ScratchDir, std::path::PathBuf, DirWatcher) {
    use llm_worker::LoadDirOptions;
    let dir = llm_worker_tests::scratch_dir(name);
    let conf = dir.join("conf");
    std::fs::create_dir(&conf).expect("mkdir");
    for plugin in ["greet", "counter"] {
        std::fs::copy(
            llm_worker_tests::plugin_path(plugin),
            dir.join(format!("{plugin}.wasm")),
        )
        .expect("copy");
    }
    std::fs::write(
        dir.join("greet.policy.toml"),
        format!(
            "[[dirs]]\nhost = {:?}\nguest = \"/conf\"\nmode = \"rw\"\n",
            conf.display().to_string()
        ),
    )
    .expect("policy");
    let host = llm_worker_tests::host().clone();
    let watcher = DirWatcher::load(host, dir.path(), LoadDirOptions::default()).expect("load");
    assert_eq!(served(&watcher), ["counter.wasm", "greet.wasm"]);
    (dir, conf, watcher)
}

/// A served plugin's policy made a link into another plugin's read-write grant (which could
/// rewrite it): the new policy is refused, and the plugin is not kept serving under the old one.
#[cfg(unix)]
#[tokio::test]
async fn a_policy_moved_into_a_read_write_grant_is_not_served() {
    let (dir, conf, mut watcher) = greet_granted_conf_read_write("dir-watcher-grant-holds");
    std::fs::write(conf.join("counter.toml"), "[limits]\nmemory_mib = 16\n").expect("policy");
    std::os::unix::fs::symlink(conf.join("counter.toml"), dir.join("counter.policy.toml"))
        .expect("link");
    watcher.rescan().await;
    assert_eq!(served(&watcher), ["greet.wasm"]);
}

/// A served plugin's file is a link into a directory no plugin may write, until another
/// plugin's new policy grants that directory read-write: the fresh load refused the served
/// plugin, but it was kept serving (its policy unchanged), rewritable by the other one.
#[cfg(unix)]
#[tokio::test]
async fn a_served_plugin_a_new_grant_holds_is_no_longer_served() {
    use llm_worker::LoadDirOptions;
    let dir = llm_worker_tests::scratch_dir("dir-watcher-grant-grows");
    let conf = dir.join("conf");
    std::fs::create_dir(&conf).expect("mkdir");
    std::fs::copy(
        llm_worker_tests::plugin_path("greet"),
        dir.join("greet.wasm"),
    )
    .expect("copy");
    std::fs::copy(
        llm_worker_tests::plugin_path("counter"),
        conf.join("counter.wasm"),
    )
    .expect("copy");
    std::os::unix::fs::symlink(conf.join("counter.wasm"), dir.join("counter.wasm")).expect("link");
    let host = llm_worker_tests::host().clone();
    let mut watcher = DirWatcher::load(host, dir.path(), LoadDirOptions::default()).expect("load");
    assert_eq!(served(&watcher), ["counter.wasm", "greet.wasm"]);
    let grant_conf = || {
        format!(
            "[[dirs]]\nhost = {:?}\nguest = \"/conf\"\nmode = \"rw\"\n",
            conf.display().to_string()
        )
    };
    // A newcomer granted the directory, but not served (it offers greet's tool): it takes
    // nothing away.
    std::fs::copy(
        llm_worker_tests::plugin_path("greet"),
        dir.join("twin.wasm"),
    )
    .expect("copy");
    std::fs::write(dir.join("twin.policy.toml"), grant_conf()).expect("policy");
    watcher.rescan().await;
    assert_eq!(served(&watcher), ["counter.wasm", "greet.wasm"]);
    std::fs::remove_file(dir.join("twin.wasm")).expect("remove");
    std::fs::remove_file(dir.join("twin.policy.toml")).expect("remove");
    watcher.rescan().await;
    assert_eq!(served(&watcher), ["counter.wasm", "greet.wasm"]);
    let ((), logs) = logged(async {
        std::fs::write(dir.join("greet.policy.toml"), grant_conf()).expect("policy");
        watcher.rescan().await;
    })
    .await;
    assert_eq!(served(&watcher), ["greet.wasm"], "{logs:?}");
    assert!(
        logs.iter().any(|line| line.contains("no longer served")
            && line.contains("read-write directory of plugin")),
        "{logs:?}"
    );
}

/// The same, while the plugin holding the read-write grant has a new version that fails to
/// load: its old version keeps serving (and can still rewrite what is in its grant), so the
/// policy moved into that grant is refused although the load did not see the grant.
#[cfg(unix)]
#[tokio::test]
async fn a_policy_moved_into_the_grant_of_a_version_kept_serving_is_not_served() {
    let (dir, conf, mut watcher) = greet_granted_conf_read_write("dir-watcher-kept-grant-holds");
    let ((), logs) = logged(async {
        std::fs::write(dir.join("greet.wasm"), b"\0asm broken").expect("break");
        std::fs::write(conf.join("counter.toml"), "[limits]\nmemory_mib = 16\n").expect("policy");
        std::os::unix::fs::symlink(conf.join("counter.toml"), dir.join("counter.policy.toml"))
            .expect("link");
        watcher.rescan().await;
    })
    .await;
    assert_eq!(served(&watcher), ["greet.wasm"], "{logs:?}");
    assert!(
        logs.iter()
            .any(|line| line.contains("read-write directory of plugin")),
        "{logs:?}"
    );
}

/// A directory holding greet, granted (read-only) `data`, a link to `first`; `second` is
/// another directory to point it at.
#[cfg(unix)]
struct Granted {
    dir: llm_worker_tests::ScratchDir,
    first: llm_worker_tests::ScratchDir,
    second: llm_worker_tests::ScratchDir,
    data: std::path::PathBuf,
}

/// Writes greet's policy in `dir`, granting it `data` (read-only) as `/data`.
#[cfg(unix)]
fn grant_greet(dir: &std::path::Path, data: &std::path::Path) {
    std::fs::write(
        dir.join("greet.policy.toml"),
        format!(
            "[[dirs]]\nhost = {:?}\nguest = \"/data\"\n",
            data.display().to_string()
        ),
    )
    .expect("policy");
}

#[cfg(unix)]
fn greet_granted_a_link(name: &str) -> Granted {
    let dir = llm_worker_tests::scratch_dir(name);
    let (first, second) = (
        llm_worker_tests::scratch_dir(&format!("{name}-first")),
        llm_worker_tests::scratch_dir(&format!("{name}-second")),
    );
    std::fs::copy(
        llm_worker_tests::plugin_path("greet"),
        dir.join("greet.wasm"),
    )
    .expect("copy");
    let data = dir.join("data");
    std::os::unix::fs::symlink(first.path(), &data).expect("link");
    grant_greet(&dir, &data);
    Granted {
        dir,
        first,
        second,
        data,
    }
}

/// A plugin whose granted directory the operator points elsewhere (a link re-pointed, in a
/// directory without a lock): no file of the directory changes, and the old version kept
/// serving with the directory it was loaded with until a restart; and with a new version of
/// the plugin file that fails to load in the same rescan, it was kept even then.
#[cfg(unix)]
#[tokio::test]
async fn a_grant_pointed_elsewhere_is_not_kept_unlocked_even_by_a_failing_update() {
    use llm_worker::LoadDirOptions;
    let Granted {
        dir,
        first,
        second,
        data,
    } = greet_granted_a_link("dir-watcher-grant-failing");
    let point = |to: &std::path::Path| {
        let _ = std::fs::remove_file(&data);
        std::os::unix::fs::symlink(to, &data).expect("link");
    };
    let host = llm_worker_tests::host().clone();
    let mut watcher = DirWatcher::load(host, dir.path(), LoadDirOptions::default()).expect("load");
    let before = watcher.groups()[0].revision();
    // Only the link changes: the rescan sees it, and sessions take the new directory.
    point(second.path());
    assert!(watcher.rescan().await, "a re-pointed grant is a change");
    assert_eq!(served(&watcher), ["greet.wasm"]);
    assert_ne!(watcher.groups()[0].revision(), before);
    // Pointed back while a broken update of the plugin arrives: the version served (holding
    // the directory it was loaded with) is not kept.
    point(first.path());
    std::fs::write(dir.join("greet.wasm"), b"\0asm broken").expect("break");
    watcher.rescan().await;
    assert!(served(&watcher).is_empty(), "{:?}", served(&watcher));
}
/// The operator moves a granted directory away and makes a new one at its path (`mv data
/// data-old && mkdir data`): the path resolves as before, so nothing was reloaded, and every
/// session, new ones too, went on reading and writing the old directory, now elsewhere.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_directory_made_anew_is_a_new_revision_and_the_old_one_is_not_opened() {
    use llm_worker::LoadDirOptions;
    let dir = llm_worker_tests::scratch_dir("dir-watcher-grant-made-anew");
    std::fs::copy(
        llm_worker_tests::plugin_path("greet"),
        dir.join("greet.wasm"),
    )
    .expect("copy");
    // Outside the plugin directory: the directory's own listing does not change.
    let outside = llm_worker_tests::scratch_dir("dir-watcher-grant-made-anew-data");
    let data = outside.join("data");
    std::fs::create_dir(&data).expect("mkdir");
    grant_greet(&dir, &data);
    let host = llm_worker_tests::host().clone();
    let mut watcher =
        DirWatcher::load(host.clone(), dir.path(), LoadDirOptions::default()).expect("load");
    let before = watcher.groups()[0].revision();
    // A plugin loaded before the move, as the served version was.
    let old = host
        .load(dir.join("greet.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::rename(&data, outside.join("data-old")).expect("move away");
    std::fs::create_dir(&data).expect("mkdir again");
    assert!(watcher.rescan().await, "a directory made anew is a change");
    assert_eq!(served(&watcher), ["greet.wasm"]);
    // The same content (a request state bound to it stays valid, on every replica); new
    // instances for the new directory.
    assert_eq!(watcher.groups()[0].revision(), before);
    // The version loaded before no longer opens the directory it holds, now elsewhere.
    let session = old.open();
    let mut worker = llm_worker::Worker::new();
    worker
        .register_tools(session.definitions())
        .expect("registers");
    let refused = worker
        .tool_server_handle()
        .call_tool("greet", r#"{"name":"Ada"}"#)
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("was replaced"), "{refused}");
    // Nothing more to reload: the new version holds the new directory.
    assert!(!watcher.rescan().await);
}

/// The operator points a grant's path at another directory and approves it (`lock`): the
/// reload found the plugin and its policy unchanged and kept serving the instances of the old
/// directory until a restart.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_pointed_elsewhere_is_a_new_revision() {
    use llm_worker::LoadDirOptions;
    // Every directory kept (one not bound would be removed at once).
    let Granted {
        dir,
        first: _first,
        second,
        data,
    } = greet_granted_a_link("dir-watcher-grant");
    let host = llm_worker_tests::host().clone();
    let lock = || llm_worker_tests::lock_dir(&dir);
    lock();
    let mut watcher =
        DirWatcher::load(host.clone(), dir.path(), LoadDirOptions::default()).expect("load");
    let before = watcher.groups()[0].revision();
    std::fs::remove_file(&data).expect("unlink");
    std::os::unix::fs::symlink(second.path(), &data).expect("link");
    lock();
    watcher.rescan().await;
    assert_eq!(served(&watcher), ["greet.wasm"]);
    assert_ne!(
        watcher.groups()[0].revision(),
        before,
        "sessions must not keep instances of the old directory"
    );
}

/// A grant moved while the directory cannot be reloaded at all (its lock no longer trusted) is
/// tried once, not at every rescan; moved back, nothing is reloaded; moved again, it is tried
/// again (a later move is news, not the move tried before).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_moved_back_and_forth_under_a_refused_reload_is_tried_once_per_move() {
    use llm_worker::LoadDirOptions;
    use llm_worker::mcp::Metrics;
    use std::os::unix::fs::PermissionsExt;
    let name = "dir-watcher-grant-back-and-forth";
    let Granted {
        dir, first, second, ..
    } = greet_granted_a_link(name);
    // The link outside the plugin directory, so that re-pointing it changes nothing there.
    let links = llm_worker_tests::scratch_dir(&format!("{name}-links"));
    let data = links.join("data");
    std::os::unix::fs::symlink(first.path(), &data).expect("link");
    grant_greet(&dir, &data);
    let point = |to: &std::path::Path| {
        let _ = std::fs::remove_file(&data);
        std::os::unix::fs::symlink(to, &data).expect("link");
    };
    llm_worker_tests::lock_dir(&dir);
    let metrics = Metrics::new();
    let mut watcher = DirWatcher::load(
        llm_worker_tests::host().clone(),
        dir.path(),
        LoadDirOptions::default(),
    )
    .expect("load")
    .metrics(metrics.clone());
    let refused = || {
        super::metrics::value(
            &metrics.render(),
            r#"llm_worker_reloads_total{outcome="refused"}"#,
        )
        .unwrap_or(0.0)
    };
    // The lock made writable by others: every reload is refused as a whole.
    let lock = dir.join(llm_worker::lock::LOCK_FILE);
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    assert!(!watcher.rescan().await);
    assert_eq!(refused(), 1.0);
    let mut tried = Vec::new();
    for to in [second.path(), second.path(), first.path(), second.path()] {
        point(to);
        assert!(!watcher.rescan().await, "nothing can be reloaded");
        tried.push(refused());
    }
    // Moved: tried; the same move again: not; moved back (as loaded): nothing to try; moved
    // again: tried.
    assert_eq!(tried, [2.0, 2.0, 2.0, 3.0]);
    assert_eq!(served(&watcher), ["greet.wasm"]);
}

/// The attack: a locked plugin, once serving, says its list changed and lists a resource the
/// lock never approved (the lock approved what it offered at load). Clients were offered it,
/// and its reads went to the plugin. Under a lock, what a list given while serving names
/// beyond what was approved is left out, saying so; without a lock it is served as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_plugin_lists_only_what_the_lock_approved_while_serving() {
    use llm_worker::LoadDirOptions;
    use rmcp::ServiceExt;
    for locked in [true, false] {
        let dir = dir_with(&format!("dir-watcher-relist-{locked}"), &["forger"]);
        if locked {
            llm_worker_tests::lock_dir(&dir);
        }
        let watcher = DirWatcher::load(
            llm_worker_tests::host().clone(),
            dir.path(),
            LoadDirOptions::default(),
        )
        .expect("load");
        let url = crate::serve(
            llm_worker::mcp::ToolCatalog::new(watcher.groups()),
            llm_worker::mcp::McpOptions::new("relisted", "1"),
        )
        .await;
        let client = ()
            .serve(rmcp::transport::StreamableHttpClientTransport::from_uri(
                url.as_str(),
            ))
            .await
            .expect("initialize");
        let ((), logs) = logged(async {
            client
                .call_tool(rmcp::model::CallToolRequestParams::new("claim"))
                .await
                .expect("claim");
        })
        .await;
        let listed: Vec<String> = client
            .list_all_resources()
            .await
            .expect("resources/list")
            .into_iter()
            .map(|resource| resource.uri.clone())
            .collect();
        assert_eq!(
            listed.iter().any(|uri| uri == "notes://all"),
            !locked,
            "locked: {locked}: {listed:?} {logs:?}"
        );
        client.cancel().await.expect("close");
    }
}

/// A reload that finds the host's instance pool full (the plugin's tools cannot be listed for
/// want of a slot) is not the plugin's failure: the version served before keeps serving, and
/// the directory is reloaded again once the first retry's wait (one second) has passed, though
/// nothing changed in it — not at every rescan before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_found_the_pool_full_is_tried_again_later() {
    let dir = dir_with("dir-watcher-busy", &["greet"]);
    let host = llm_worker::PluginHost::builder()
        .instance_pool(1)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut watcher = DirWatcher::load(
        host.clone(),
        dir.path(),
        llm_worker::LoadDirOptions::default(),
    )
    .expect("load");
    let before = watcher.groups()[0].revision();
    // The pool's one slot, held by a session of the served plugin.
    let plugin = host
        .load(dir.join("greet.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut worker = llm_worker::Worker::new();
    worker
        .register_tools(plugin.definitions())
        .unwrap_or_else(|e| panic!("{e}"));
    let holder = worker.tool_server_handle();
    let greeted = holder.call_tool("greet", r#"{"name":"Ada"}"#).await;
    assert!(greeted.is_ok(), "{greeted:?}");
    // A new version (another plugin's code under the name) comes while the slot is held.
    std::fs::copy(
        llm_worker_tests::plugin_path("counter"),
        dir.join("greet.wasm"),
    )
    .expect("copy");
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed, "{said:?}");
    assert_eq!(
        watcher.groups()[0].revision(),
        before,
        "the old version serves"
    );
    // The slot is given back; a rescan at once does not reload what did not change.
    drop(holder);
    drop(worker);
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(!changed && said.is_empty(), "{said:?}");
    // After the wait, the reload is tried again and takes the new version.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (changed, said) = logged(watcher.rescan()).await;
    assert!(changed, "{said:?}");
    assert_ne!(watcher.groups()[0].revision(), before);
}

/// A plugin added while serving whose tasks may run longer than the server keeps tasks: said
/// when it is served, as for the plugins served at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_served_anew_whose_tasks_outlive_their_record_is_warned_of() {
    use llm_worker::LoadDirOptions;
    let dir = llm_worker_tests::scratch_dir("dir-watcher-task-ttl");
    let host = llm_worker_tests::host().clone();
    let mut watcher = DirWatcher::load(host, dir.path(), LoadDirOptions::default())
        .expect("load")
        .task_ttl(std::time::Duration::from_secs(60));
    let ((), logs) = logged(async {
        std::fs::copy(
            llm_worker_tests::plugin_path("conformance"),
            dir.join("conformance.wasm"),
        )
        .expect("copy");
        std::fs::write(
            dir.join("conformance.policy.toml"),
            "[limits]\ntask_timeout_ms = 120000\n",
        )
        .expect("policy");
        watcher.rescan().await;
    })
    .await;
    assert_eq!(served(&watcher), ["conformance.wasm"]);
    assert!(
        logs.iter().any(|line| line.contains("plugin 'conformance'")
            && line.contains("120 s")
            && line.contains("--task-ttl")),
        "{logs:?}"
    );
}
