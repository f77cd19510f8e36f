//! Open files are a host resource: capped per instance and for the whole host, and never a
//! reason for the host itself to run out; special files in a granted directory are refused
//! without blocking; a granted directory is the one resolved at load.

use llm_worker::*;
use llm_worker_tests::{ScratchDir, error_message, plugin, plugin_path, scratch_dir, session};
use serde_json::json;

/// A directory holding the fixture `fixture` as `name.wasm`, with a policy granting `data/`
/// read-only as `/data` (plus `extra`), and `data/file.txt`.
fn granted(name: &str, fixture: &str, extra: &str) -> ScratchDir {
    let dir = scratch_dir(name);
    std::fs::copy(plugin_path(fixture), dir.join(format!("{name}.wasm"))).expect("copy plugin");
    std::fs::write(
        dir.join(format!("{name}.policy.toml")),
        format!("[[dirs]]\nhost = \"data\"\nguest = \"/data\"\nmode = \"ro\"\n{extra}"),
    )
    .expect("write policy");
    std::fs::create_dir(dir.join("data")).expect("mkdir");
    std::fs::write(dir.join("data/file.txt"), "kept").expect("write");
    dir
}

/// `touch` of `file.txt` (now).
async fn touch_file(handle: &ToolServerHandle) -> Result<String, ToolServerError> {
    handle.call_tool("touch", r#"{"name":"file.txt"}"#).await
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
}

async fn hold(handle: &ToolServerHandle, count: u32) -> Result<String, ToolServerError> {
    let input = json!({"path": "/data/file.txt", "count": count}).to_string();
    handle.call_tool("hold", &input).await
}

/// How many handles a `hold` reply says the plugin holds.
fn held(reply: &str) -> usize {
    reply
        .strip_prefix("held=")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("not a hold reply: {reply}"))
}

/// Thirty sessions each trying to hold 900 handles of one file (27,000 descriptors, more than
/// the process may open here): each instance gets at most 256 (its granted directory
/// included), all of them together at most the host's budget, and the sessions that do not
/// fit fail to start as a lack of host capacity, not as the plugin's fault. The host keeps
/// opening files, and closed files give their share back.
#[tokio::test(flavor = "multi_thread")]
async fn open_files_are_capped_per_instance_and_for_the_host() {
    const BUDGET: usize = 2_000;
    let host = PluginHost::builder()
        .max_open_files(BUDGET)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = granted("holder", "holder", "");
    let holder = host
        .load(dir.join("holder.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut sessions = Vec::new();
    let mut replies = Vec::new();
    let mut refused_sessions = Vec::new();
    for _ in 0..30 {
        let handle = session(&holder);
        match hold(&handle, 900).await {
            Ok(reply) => {
                replies.push(reply);
                sessions.push(handle);
            }
            Err(error) => {
                let message = format!("{error}");
                assert!(
                    message.contains("open files") && message.contains("max_open_files"),
                    "{message}"
                );
                refused_sessions.push(handle);
            }
        }
    }
    // 256 per instance: the granted directory and 255 files; the plugin sees `ENOMEM`.
    for reply in &replies[..7] {
        assert_eq!(reply, "held=255 refused=OutOfMemory");
    }
    let total: usize = replies.iter().map(|reply| held(reply)).sum::<usize>() + replies.len();
    assert_eq!(total, BUDGET, "{replies:?}");
    assert_eq!(replies.len() + refused_sessions.len(), 30);

    // A session that could not start is not blamed: asking again never disables it.
    let late = &refused_sessions[0];
    for _ in 0..6 {
        let message = format!("{:?}", hold(late, 1).await);
        assert!(message.contains("max_open_files"), "{message}");
    }
    // The host itself still opens files: it loads a plugin, and sessions without grants run.
    let counter = host
        .load(plugin_path("counter"))
        .unwrap_or_else(|e| panic!("{e}"));
    let counting = session(&counter);
    assert_eq!(counting.call_tool("count", "{}").await.as_deref(), Ok("0"));
    assert!(std::fs::File::open(dir.join("data/file.txt")).is_ok());

    // Closed files give their share back at once: the late session starts now.
    assert_eq!(
        sessions[0].call_tool("release", "{}").await.as_deref(),
        Ok("released=255")
    );
    assert_eq!(
        hold(late, 900).await.as_deref(),
        Ok("held=254 refused=OutOfMemory")
    );
    // Reading a directory opens it (twice, while it reads): refused at the cap too.
    let listed = late
        .call_tool("list", &json!({"path": "/data"}).to_string())
        .await;
    assert_eq!(
        error_message(listed),
        "Execution failed: /data: OutOfMemory"
    );

    // Ending the sessions gives everything back. A 1.0.0 instance ends on its own event loop
    // task, just after its session lets go of it: the fresh session's start may be refused
    // until then (which never counts against it).
    drop(sessions);
    drop(refused_sessions);
    let fresh = session(&holder);
    let mut held_again = hold(&fresh, 900).await;
    for _ in 0..200 {
        if held_again.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        held_again = hold(&fresh, 900).await;
    }
    assert_eq!(held_again.as_deref(), Ok("held=255 refused=OutOfMemory"));
    assert_eq!(
        fresh.call_tool("release", "{}").await.as_deref(),
        Ok("released=255")
    );
    assert_eq!(
        fresh
            .call_tool("list", &json!({"path": "/data"}).to_string())
            .await
            .as_deref(),
        Ok("1")
    );
}

/// A FIFO in a granted directory: opening it for reading would block until a writer comes,
/// on a thread of its own, for ever after the call timed out. It is refused at once, the
/// instance keeps its state, and other plugins keep serving.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_in_a_granted_directory_is_refused_without_blocking() {
    let dir = granted("fifo-grant", "trapper", "[limits]\ntimeout_ms = 2000\n");
    mkfifo(&dir.join("data/pipe"));
    let trapper = llm_worker_tests::host()
        .load(dir.join("fifo-grant.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let handle = session(&trapper);
    assert_eq!(handle.call_tool("tick", "{}").await.as_deref(), Ok("0"));
    for _ in 0..20 {
        let message = error_message(
            handle
                .call_tool("read_file", r#"{"path":"/data/pipe"}"#)
                .await,
        );
        assert!(
            message.contains("/data/pipe") && message.contains("ermission denied"),
            "refused by the host, not timed out: {message}"
        );
    }
    // The same instance, never restarted: no call ran out of time.
    assert_eq!(handle.call_tool("tick", "{}").await.as_deref(), Ok("1"));
    assert_eq!(
        handle
            .call_tool("read_file", r#"{"path":"/data/file.txt"}"#)
            .await
            .as_deref(),
        Ok("kept")
    );
    let counter = session(&plugin("counter"));
    assert_eq!(counter.call_tool("count", "{}").await.as_deref(), Ok("0"));
}

/// The same FIFO, its times set through `set-times-at` following links: wasmtime-wasi opens
/// the file for writing to set them, which blocks until a reader comes. Refused at once; a
/// regular file's times are set.
#[tokio::test(flavor = "multi_thread")]
async fn setting_a_fifos_times_is_refused_without_blocking() {
    let dir = scratch_dir("fifo-times");
    std::fs::copy(plugin_path("holder"), dir.join("toucher.wasm")).expect("copy plugin");
    std::fs::write(
        dir.join("toucher.policy.toml"),
        "[[dirs]]\nhost = \"data\"\nguest = \"/data\"\nmode = \"rw\"\n[limits]\ntimeout_ms = 2000\n",
    )
    .expect("write policy");
    std::fs::create_dir(dir.join("data")).expect("mkdir");
    let file = dir.join("data/file.txt");
    std::fs::write(&file, "kept").expect("write");
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .and_then(|f| f.set_modified(old))
        .expect("set an old time");
    mkfifo(&dir.join("data/pipe"));
    let toucher = llm_worker_tests::host()
        .load(dir.join("toucher.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let handle = session(&toucher);
    for _ in 0..20 {
        let reply = handle.call_tool("touch", r#"{"name":"pipe"}"#).await;
        let message = error_message(reply);
        assert!(
            message.contains("pipe: ErrorCode") && message.contains("\"access\""),
            "refused by the host, not timed out: {message}"
        );
    }
    assert_eq!(touch_file(&handle).await.as_deref(), Ok("touched"));
    let modified = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .expect("stat");
    assert!(modified > old, "the file's time was set");
    // A time whose nanoseconds carry past the largest second is the plugin's error, not a
    // panic of the host's.
    let message = error_message(
        handle
            .call_tool(
                "touch",
                r#"{"name":"file.txt","seconds":18446744073709551615,"nanoseconds":1000000000}"#,
            )
            .await,
    );
    assert!(message.contains("\"overflow\""), "{message}");
    assert_eq!(touch_file(&handle).await.as_deref(), Ok("touched"));
}

/// A granted directory is opened when the plugin is loaded: an instance started later never
/// gets another directory put at its path (it refuses to start, saying the directory was
/// replaced: `serve --watch` loads the plugin again with the new one), nor a link put in
/// its path.
#[tokio::test]
async fn a_granted_directory_is_the_one_resolved_at_load() {
    let dir = granted("grant-held", "trapper", "");
    let trapper = llm_worker_tests::host()
        .load(dir.join("grant-held.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let read = |handle: ToolServerHandle| async move {
        handle
            .call_tool("read_file", r#"{"path":"/data/file.txt"}"#)
            .await
    };
    // Another directory in its place.
    std::fs::rename(dir.join("data"), dir.join("data-loaded")).expect("rename");
    std::fs::create_dir(dir.join("data")).expect("mkdir");
    std::fs::write(dir.join("data/file.txt"), "swapped").expect("write");
    let message = error_message(read(session(&trapper)).await);
    assert!(message.contains("/data was replaced"), "{message}");
    // Another load takes the directory now there.
    let reloaded = llm_worker_tests::host()
        .load(dir.join("grant-held.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(session(&reloaded)).await.as_deref(), Ok("swapped"));
    // A link in its place.
    let elsewhere = scratch_dir("grant-held-elsewhere");
    std::fs::write(elsewhere.join("file.txt"), "elsewhere").expect("write");
    std::fs::remove_dir_all(dir.join("data")).expect("remove");
    std::os::unix::fs::symlink(&elsewhere, dir.join("data")).expect("link");
    let message = error_message(read(session(&trapper)).await);
    assert!(
        message.contains("now leads elsewhere") && message.contains("a link was put in its path"),
        "{message}"
    );
    // What a client may read names the directory as the plugin sees it, not the host's paths.
    assert!(
        !message.contains(&elsewhere.path().display().to_string())
            && !message.contains(&dir.path().display().to_string()),
        "{message}"
    );
}

/// wasmtime-wasi reads a directory's entries at once and keeps them in the listing: a plugin
/// keeping hundreds of listings of a large directory would multiply it in host memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_listings_are_capped_per_instance() {
    let dir = granted("lister", "holder", "");
    let lister = llm_worker_tests::host()
        .load(dir.join("lister.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let handle = session(&lister);
    let listings = |count: u32| {
        let handle = handle.clone();
        async move {
            handle
                .call_tool("listings", &json!({ "count": count }).to_string())
                .await
        }
    };
    let refused = listings(20).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        refused.starts_with("listed=8 refused=") && refused.contains("insufficient-memory"),
        "{refused}"
    );
    // Dropped listings count back.
    assert_eq!(
        handle.call_tool("release", "{}").await.as_deref(),
        Ok("released=0")
    );
    assert_eq!(listings(3).await.as_deref(), Ok("listed=3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_too_large_for_host_memory_is_refused() {
    // wasmtime-wasi reads a directory's entries at once into host memory: a plugin that may
    // write could fill a directory with a million files and list it. A listing over 4 MiB of
    // names is refused, of the granted directory itself (opened by the host, `O_PATH`) as of a
    // directory the plugin opened; a small directory beside them lists as before.
    let dir = granted("large-listing", "holder", "");
    let long = "n".repeat(240);
    for at in ["data", "data/big"] {
        let at = dir.join(at);
        std::fs::create_dir_all(&at).expect("mkdir");
        for i in 0..16_000 {
            std::fs::write(at.join(format!("{long}{i:05}")), "").expect("write");
        }
    }
    std::fs::create_dir(dir.join("data/small")).expect("mkdir");
    std::fs::write(dir.join("data/small/one.txt"), "1").expect("write");
    let plugin = llm_worker_tests::host()
        .load(dir.join("large-listing.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let handle = session(&plugin);
    let list = |path: &'static str| {
        let handle = handle.clone();
        async move {
            handle
                .call_tool("list", &json!({ "path": path }).to_string())
                .await
        }
    };
    for large in ["/data", "/data/big"] {
        assert_eq!(
            error_message(list(large).await),
            format!("Execution failed: {large}: OutOfMemory")
        );
    }
    assert_eq!(list("/data/small").await.as_deref(), Ok("1"));
}

#[test]
fn a_grant_inside_a_writable_grant_is_refused() {
    // The attack: `data` is granted writable and `data/ref` on its own; the plugin renames
    // `ref` away and puts a link leading anywhere in its place (`../../../home/u/.ssh`), which
    // the next load resolved and granted as `/ref`. A grant inside a writable one is refused,
    // by the path as written as well as by where it leads.
    let policy = "[[dirs]]\nhost = \"data\"\nguest = \"/data\"\nmode = \"rw\"\n\
                  [[dirs]]\nhost = \"data/ref\"\nguest = \"/ref\"\nmode = \"ro\"\n";
    let dir = scratch_dir("nested-grants");
    std::fs::copy(plugin_path("holder"), dir.join("nested.wasm")).expect("copy plugin");
    std::fs::write(dir.join("nested.policy.toml"), policy).expect("write policy");
    std::fs::create_dir_all(dir.join("data/ref")).expect("mkdir");
    let refused = |dir: &std::path::Path| {
        let error = llm_worker_tests::host()
            .load(dir.join("nested.wasm"))
            .map(|_| ())
            .expect_err("refused");
        let message = error.to_string();
        assert!(
            message.contains("dirs[1].host") && message.contains("inside dirs[0]"),
            "{message}"
        );
    };
    refused(&dir);
    // After the plugin's move: `data/ref` is a link to a directory outside `data`.
    std::fs::create_dir(dir.join("outside")).expect("mkdir");
    std::fs::remove_dir(dir.join("data/ref")).expect("rmdir");
    std::os::unix::fs::symlink("../outside", dir.join("data/ref")).expect("symlink");
    refused(&dir);
    // A read-only outer grant cannot be changed by the plugin: the inner one stands.
    std::fs::write(
        dir.join("nested.policy.toml"),
        policy.replacen("\"rw\"", "\"ro\"", 1),
    )
    .expect("write policy");
    llm_worker_tests::host()
        .load(dir.join("nested.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    // A chain: `alias` (beside `data`) -> `data/current` -> `outside`. The grant of `alias`
    // is outside `data` as written and as resolved, but the plugin may change `current`,
    // which the next load follows: refused.
    std::fs::remove_file(dir.join("data/ref")).expect("unlink");
    std::os::unix::fs::symlink("../outside", dir.join("data/current")).expect("symlink");
    std::os::unix::fs::symlink("data/current", dir.join("alias")).expect("symlink");
    std::fs::write(
        dir.join("nested.policy.toml"),
        "[[dirs]]\nhost = \"data\"\nguest = \"/data\"\nmode = \"rw\"\n\
         [[dirs]]\nhost = \"alias\"\nguest = \"/ref\"\nmode = \"ro\"\n",
    )
    .expect("write policy");
    let message = llm_worker_tests::host()
        .load(dir.join("nested.wasm"))
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(
        message.contains("dirs[1].host") && message.contains("reached through dirs[0]"),
        "{message}"
    );
}

/// A plugin with a writable grant planting a link that points out of it (`notes.txt` →
/// `../../.ssh/id_rsa`): the sandbox never follows it, but the operator's editor, backup or
/// web server reading the directory would, and a program writing there would write through
/// it. wasmtime-wasi refused only absolute targets. A target that climbs is refused; one going
/// down from the link is made.
#[tokio::test(flavor = "multi_thread")]
async fn a_link_pointing_out_of_a_grant_is_refused() {
    let dir = scratch_dir("link-out");
    std::fs::copy(plugin_path("holder"), dir.join("linker.wasm")).expect("copy plugin");
    std::fs::write(
        dir.join("linker.policy.toml"),
        "[[dirs]]\nhost = \"data\"\nguest = \"/data\"\nmode = \"rw\"\n",
    )
    .expect("write policy");
    std::fs::create_dir_all(dir.join("data/sub")).expect("mkdir");
    std::fs::write(dir.join("data/file.txt"), "inside").expect("write");
    std::fs::write(dir.join("secret"), "outside").expect("write");
    let linker = llm_worker_tests::host()
        .load(dir.join("linker.wasm"))
        .unwrap_or_else(|e| panic!("{e}"));
    let handle = session(&linker);
    let link = async |target: &str, name: &str| {
        handle
            .call_tool("link", &json!({"target": target, "name": name}).to_string())
            .await
    };
    for (target, name) in [
        ("../secret", "up"),
        ("sub/../../secret", "through"),
        ("..", "parent"),
        ("/etc/passwd", "absolute"),
    ] {
        let message = error_message(link(target, name).await);
        assert!(
            message.contains(name)
                && (message.contains("NotPermitted") || message.contains("not-permitted")),
            "{target}: {message}"
        );
        assert!(
            std::fs::symlink_metadata(dir.join("data").join(name)).is_err(),
            "{target}: a link was made"
        );
    }
    assert_eq!(
        link("file.txt", "down").await.as_deref(),
        Ok("linked"),
        "a link going down is made"
    );
    assert_eq!(
        std::fs::read_link(dir.join("data/down")).expect("a link"),
        std::path::Path::new("file.txt")
    );
    assert_eq!(
        link("../file.txt", "sub/up")
            .await
            .as_deref()
            .map_err(|_| ()),
        Err(()),
        "even a climb that lands inside (a rename of its directory would move it)"
    );
}
