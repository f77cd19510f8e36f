//! The compiled cache: a second load deserializes instead of compiling; damaged entries are
//! recompiled, never trusted; an unusable cache directory only costs speed.

use std::path::{Path, PathBuf};

use llm_worker::*;
use llm_worker_tests::{plugin_path, scratch_dir};
use sha2::Digest;

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
        Ok("Hello, cache!")
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
    assert_ne!(
        std::fs::read(&entry).expect("read"),
        b"garbage",
        "the entry was rewritten"
    );
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
    assert_eq!(std::fs::read(&not_a_dir).expect("read"), b"x", "left alone");
}

/// The entry the cache holds for the plugin `name`, after a load through `dir`.
fn entry_of(dir: &Path, name: &str) -> PathBuf {
    let before = entries(dir);
    cached_host(dir)
        .load(plugin_path(name))
        .unwrap_or_else(|e| panic!("{e}"));
    let entry = entries(dir)
        .into_iter()
        .find(|entry| !before.contains(entry))
        .or_else(|| {
            // Already there: the entry named after the plugin's SHA-256.
            let bytes = std::fs::read(plugin_path(name)).expect("read plugin");
            let hash: String = sha2::Sha256::digest(bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            entries(dir).into_iter().find(|e| {
                e.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&hash))
            })
        });
    entry.unwrap_or_else(|| panic!("no entry for {name} in {}", dir.display()))
}

/// The tool names a host with the cache `dir` loads from `greet.wasm`.
fn greet_tools(dir: &Path) -> Vec<String> {
    cached_host(dir)
        .load(plugin_path("greet"))
        .unwrap_or_else(|e| panic!("{e}"))
        .tool_names()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Writes, under `target`'s name, the compiled code of `source` with a header claiming it was
/// compiled from `claimed` — what an attacker who reads our source and can write the directory
/// would plant. (Header: magic, SHA-256 of the plugin, XXH3-128 of hash and body, body.)
fn forge(source: &Path, target: &Path, claimed: &str) {
    let data = std::fs::read(source).expect("read entry");
    let body = &data[8 + 32 + 16..];
    let hash = sha2::Sha256::digest(std::fs::read(plugin_path(claimed)).expect("read plugin"));
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(&hash);
    hasher.update(body);
    let mut forged = data[..8].to_vec();
    forged.extend_from_slice(&hash);
    forged.extend_from_slice(&hasher.digest128().to_le_bytes());
    forged.extend_from_slice(body);
    let _ = std::fs::remove_file(target);
    std::fs::write(target, forged).expect("plant");
}

#[test]
fn an_entry_renamed_to_another_plugin_is_not_run() {
    let dir = scratch_dir("cache-renamed");
    let counter = entry_of(&dir, "counter");
    let greet = entry_of(&dir, "greet");
    std::fs::copy(&counter, &greet).expect("plant counter's code as greet's");
    assert_eq!(greet_tools(&dir), ["greet"], "greet's own code ran");
    assert_ne!(
        std::fs::read(&greet).expect("read"),
        std::fs::read(&counter).expect("read"),
        "the planted entry was replaced"
    );
}

#[cfg(unix)]
#[test]
fn a_cache_directory_others_can_write_is_not_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("cache-shared");
    let counter = entry_of(&dir, "counter");
    let greet = entry_of(&dir, "greet");
    // A forged entry: counter's code, claiming to be compiled from greet.
    forge(&counter, &greet, "greet");
    std::fs::set_permissions(&greet, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    assert_eq!(
        greet_tools(&dir),
        ["greet"],
        "the shared directory was not read"
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).expect("chmod");
    assert_eq!(greet_tools(&dir), ["greet"], "nor when its group may write");
    // Nothing was written there either.
    assert_eq!(entries(&dir).len(), 2);

    // Private again, the forged entry is read: this is what the directory check prevents
    // (the forgery is complete; only the user's own directory keeps it out).
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    assert_eq!(greet_tools(&dir), ["count", "peek"]);
}

#[cfg(unix)]
#[test]
fn an_entry_others_can_write_or_a_link_is_not_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("cache-entry-mode");
    let counter = entry_of(&dir, "counter");
    let greet = entry_of(&dir, "greet");
    forge(&counter, &greet, "greet");
    std::fs::set_permissions(&greet, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    assert_eq!(greet_tools(&dir), ["greet"]);

    // A link in place of the entry, to a forged file elsewhere.
    let elsewhere_dir = scratch_dir("cache-entry-link-target");
    let elsewhere = elsewhere_dir.join("forged.cwasm");
    forge(&counter, &elsewhere, "greet");
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let _ = std::fs::remove_file(&greet);
    std::os::unix::fs::symlink(&elsewhere, &greet).expect("link");
    assert_eq!(greet_tools(&dir), ["greet"]);
}

#[cfg(unix)]
#[test]
fn a_cache_directory_of_another_user_is_not_read() {
    use std::os::unix::fs::MetadataExt;
    let dir = scratch_dir("cache-owner");
    let counter = entry_of(&dir, "counter");
    let greet = entry_of(&dir, "greet");
    forge(&counter, &greet, "greet");
    // Giving a directory away needs root; elsewhere this attack cannot be set up.
    if std::os::unix::fs::chown(&dir, Some(65534), None).is_err() {
        eprintln!("skipped: cannot give the directory to another user (not root)");
        return;
    }
    assert_eq!(std::fs::metadata(&dir).expect("stat").uid(), 65534);
    assert_eq!(greet_tools(&dir), ["greet"]);
}

#[cfg(unix)]
#[test]
fn a_new_cache_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let root = scratch_dir("cache-new");
    let dir = root.join("a/b/compiled");
    entry_of(&dir, "greet");
    let mode = std::fs::metadata(&dir)
        .expect("created")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
}

#[test]
fn grants_covering_the_cache_or_the_plugin_directory_are_refused() {
    let root = scratch_dir("cache-grants");
    let plugins = root.join("plugins");
    let cache = root.join("cache");
    std::fs::create_dir_all(plugins.join("data")).expect("mkdir");
    std::fs::create_dir_all(cache.join("inside")).expect("mkdir");
    std::fs::copy(plugin_path("greet"), plugins.join("greet.wasm")).expect("copy");
    let load = |host: &str, mode: &str| {
        std::fs::write(
            plugins.join("greet.policy.toml"),
            format!("[[dirs]]\nhost = {host:?}\nguest = \"/d\"\nmode = \"{mode}\"\n"),
        )
        .expect("policy");
        cached_host(&cache).load(plugins.join("greet.wasm"))
    };
    for (host, mode, says) in [
        (".", "ro", "the plugin's own directory"),
        ("..", "ro", "the plugin's own directory"),
        ("/", "ro", "the plugin's own directory"),
        ("../cache", "rw", "compiled cache"),
        ("../cache/inside", "ro", "compiled cache"),
    ] {
        match load(host, mode) {
            Ok(_) => panic!("the grant of {host:?} was accepted"),
            Err(error) => {
                let message = error.to_string();
                assert!(
                    message.contains("dirs[0].host") && message.contains(says),
                    "{host}: {message}"
                );
            }
        }
    }
    // A directory of its own, even inside the plugin directory, is fine.
    assert!(load("data", "rw").is_ok());

    // Loaded recursively, a read-write directory inside the plugin directory would let the
    // plugin add plugins: refused; read-only is fine.
    load("data", "rw").expect("loads alone");
    let options = LoadDirOptions::default().recursive(true);
    let loaded = cached_host(&cache)
        .load_dir_with(&plugins, options, |_, _, _| {})
        .expect("reads");
    assert!(loaded.plugins.is_empty());
    let message = loaded.failures[0].to_string();
    assert!(message.contains("loaded recursively"), "{message}");
    load("data", "ro").expect("loads alone");
    let loaded = cached_host(&cache)
        .load_dir_with(&plugins, options, |_, _, _| {})
        .expect("reads");
    assert_eq!(loaded.plugins.len(), 1, "{:?}", loaded.failures);
}

/// The embedder's secrets (the command's token file, OAuth client secret, request-state key,
/// audit log): a grant holding one, or a directory on the way to one, is refused, whether the
/// file exists yet or not, and a grant inside a protected directory; a grant beside them is not.
#[test]
fn grants_holding_a_protected_file_are_refused() {
    let root = scratch_dir("protected-grants");
    let plugins = root.join("plugins");
    let secrets = root.join("secrets");
    std::fs::create_dir_all(&plugins).expect("mkdir");
    std::fs::create_dir_all(secrets.join("keys")).expect("mkdir");
    std::fs::create_dir_all(root.join("data")).expect("mkdir");
    std::fs::write(secrets.join("keys").join("tokens"), "secret\n").expect("tokens");
    std::fs::copy(plugin_path("greet"), plugins.join("greet.wasm")).expect("copy");
    let host = PluginHost::builder()
        .protect(secrets.join("keys").join("tokens"))
        .protect(secrets.join("audit.log"))
        .build()
        .expect("a host");
    let load = |granted: &Path| {
        std::fs::write(
            plugins.join("greet.policy.toml"),
            format!("[[dirs]]\nhost = {granted:?}\nguest = \"/d\"\nmode = \"ro\"\n"),
        )
        .expect("policy");
        host.load(plugins.join("greet.wasm"))
    };
    for granted in [secrets.join("keys"), secrets.clone()] {
        let message = match load(&granted) {
            Ok(_) => panic!("the grant of {} was accepted", granted.display()),
            Err(error) => error.to_string(),
        };
        assert!(
            message.contains("dirs[0].host") && message.contains("no plugin may read or replace"),
            "{}: {message}",
            granted.display()
        );
    }
    assert!(load(&root.join("data")).is_ok());
    // A file not there yet (an audit log the server will create) is protected where it will be.
    std::fs::remove_file(secrets.join("keys").join("tokens")).expect("rm");
    std::fs::create_dir(secrets.join("logs")).expect("mkdir");
    let host = PluginHost::builder()
        .protect(secrets.join("logs").join("audit.log"))
        .build()
        .expect("a host");
    std::fs::write(
        plugins.join("greet.policy.toml"),
        format!(
            "[[dirs]]\nhost = {:?}\nguest = \"/d\"\nmode = \"rw\"\n",
            secrets.join("logs")
        ),
    )
    .expect("policy");
    let refused = host.load(plugins.join("greet.wasm"));
    assert!(
        refused.is_err_and(|error| error.to_string().contains("audit.log")),
        "a grant of the directory an audit log will be made in"
    );
    // A protected directory: a grant inside it is refused as one holding it is.
    std::fs::create_dir_all(secrets.join("keys").join("inner")).expect("mkdir");
    let host = PluginHost::builder()
        .protect(secrets.join("keys"))
        .build()
        .expect("a host");
    for granted in [secrets.join("keys").join("inner"), secrets.clone()] {
        std::fs::write(
            plugins.join("greet.policy.toml"),
            format!("[[dirs]]\nhost = {granted:?}\nguest = \"/d\"\nmode = \"ro\"\n"),
        )
        .expect("policy");
        let refused = host.load(plugins.join("greet.wasm"));
        assert!(
            refused.is_err_and(|error| error.to_string().contains("no plugin may read")),
            "the grant of {}",
            granted.display()
        );
    }
}

/// A grant over a compiled cache the host does not use now — its own when the directory is
/// unusable, the default one when it has none — would still let the plugin plant native code
/// that a later host runs: refused all the same.
#[cfg(unix)]
#[test]
fn grants_covering_a_cache_the_host_does_not_use_now_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = scratch_dir("cache-grants-unused");
    let plugins = root.join("plugins");
    std::fs::create_dir_all(&plugins).expect("mkdir");
    std::fs::copy(plugin_path("greet"), plugins.join("greet.wasm")).expect("copy");
    let grant = |dir: &Path| {
        std::fs::write(
            plugins.join("greet.policy.toml"),
            format!("[[dirs]]\nhost = {dir:?}\nguest = \"/d\"\nmode = \"rw\"\n"),
        )
        .expect("policy");
    };
    // This host's cache, unusable (below a directory anyone may write), not even created.
    let shared = root.join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    grant(&shared);
    let error = cached_host(&shared.join("not-yet/compiled"))
        .load(plugins.join("greet.wasm"))
        .expect_err("refused");
    assert!(
        error.to_string().contains("dirs[0].host") && error.to_string().contains("compiled cache"),
        "{error}"
    );
    // The default cache, from a host with none: the grant of its nearest existing parent.
    let default = PluginHost::default_cache_dir().expect("HOME is set");
    let existing = default
        .ancestors()
        .find(|dir| dir.is_dir())
        .expect("the root exists");
    let host = PluginHost::with_options(Limits::default(), None).unwrap_or_else(|e| panic!("{e}"));
    // (Where it holds the scratch directory, the grant is refused as holding the plugin's.)
    if !plugins.canonicalize().expect("real").starts_with(existing) {
        grant(existing);
        let error = host.load(plugins.join("greet.wasm")).expect_err("refused");
        assert!(error.to_string().contains("compiled cache"), "{error}");
    }
    // A directory of its own beside them is fine.
    let data = root.join("data");
    std::fs::create_dir(&data).expect("mkdir");
    grant(&data);
    assert!(host.load(plugins.join("greet.wasm")).is_ok());
}

/// A grant holding a link on the way to the cache or to the plugin's own directory lets the
/// plugin point the link elsewhere — at a cache of its own making, at plugins of its own —
/// though the real paths do not overlap: refused.
#[cfg(unix)]
#[test]
fn grants_holding_a_link_on_the_way_to_the_cache_or_the_plugins_are_refused() {
    let root = scratch_dir("cache-grants-links");
    let home = root.join("home");
    let real = root.join("real");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::create_dir_all(real.join("cache")).expect("mkdir");
    std::fs::create_dir_all(real.join("plugins")).expect("mkdir");
    // `home/.cache` and `home/plugins` are links out of `home`.
    std::os::unix::fs::symlink(real.join("cache"), home.join(".cache")).expect("link");
    std::os::unix::fs::symlink(real.join("plugins"), home.join("plugins")).expect("link");
    std::fs::copy(plugin_path("greet"), real.join("plugins/greet.wasm")).expect("copy");
    let other = root.join("other");
    std::fs::create_dir_all(other.join("plugins")).expect("mkdir");
    std::fs::copy(plugin_path("greet"), other.join("plugins/greet.wasm")).expect("copy");
    let grant = |plugins: &Path, dir: &Path| {
        std::fs::write(
            plugins.join("greet.policy.toml"),
            format!("[[dirs]]\nhost = {dir:?}\nguest = \"/d\"\nmode = \"rw\"\n"),
        )
        .expect("policy");
    };
    // The cache reached through `home/.cache`; the plugin elsewhere; `home` granted.
    grant(&other.join("plugins"), &home);
    let error = cached_host(&home.join(".cache/compiled"))
        .load(other.join("plugins/greet.wasm"))
        .expect_err("refused");
    assert!(error.to_string().contains("on the way to one"), "{error}");
    // The plugin reached through `home/plugins`; `home` granted.
    let plugins = home.join("plugins");
    grant(&plugins, &home);
    let error = cached_host(&root.join("cache"))
        .load(plugins.join("greet.wasm"))
        .expect_err("refused");
    assert!(error.to_string().contains("on the way to it"), "{error}");
    // A directory holding no link on either way is fine.
    let data = root.join("data");
    std::fs::create_dir(&data).expect("mkdir");
    grant(&plugins, &data);
    assert!(
        cached_host(&root.join("cache"))
            .load(plugins.join("greet.wasm"))
            .is_ok()
    );
}

/// A cache directory below one that others may write (and that is not sticky) could be
/// swapped for theirs: not used. Reached through a link, it is judged where it really is.
#[cfg(unix)]
#[test]
fn a_cache_below_a_directory_others_can_write_is_not_read() {
    use std::os::unix::fs::PermissionsExt;
    let shared = scratch_dir("cache-shared-parent");
    let dir = shared.join("cache");
    let counter = entry_of(&dir, "counter");
    let greet = entry_of(&dir, "greet");
    forge(&counter, &greet, "greet");
    std::fs::set_permissions(&greet, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    assert_eq!(greet_tools(&dir), ["greet"]);
    // A link from a safe place to it changes nothing.
    let safe = scratch_dir("cache-link");
    let link = safe.join("cache");
    std::os::unix::fs::symlink(&dir, &link).expect("link");
    assert_eq!(greet_tools(&link), ["greet"]);
    // Sticky, like /tmp: others cannot replace what is ours, so the forgery (in the user's
    // own directory) is read again.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    assert_eq!(greet_tools(&link), ["count", "peek"]);
}

/// `PluginHost::check_cache_dir` answers as the host decides: a directory below one that
/// others may write (not sticky) is refused, saying which; made sticky, it is accepted, created
/// private, and given back with links resolved.
#[cfg(unix)]
#[test]
fn check_cache_dir_answers_as_the_host_decides() {
    use std::os::unix::fs::PermissionsExt;
    let shared = scratch_dir("check-cache-dir");
    let dir = shared.join("a").join("cache");
    std::fs::create_dir(shared.join("a")).expect("mkdir");
    std::fs::set_permissions(shared.join("a"), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    let refused = PluginHost::check_cache_dir(&dir).expect_err("refused");
    assert!(
        refused.contains("may be written by other users") && refused.contains("/a"),
        "{refused}"
    );
    std::fs::set_permissions(shared.join("a"), std::fs::Permissions::from_mode(0o1777))
        .expect("chmod");
    let link = shared.join("link");
    std::os::unix::fs::symlink(&dir, &link).expect("link");
    let resolved = PluginHost::check_cache_dir(&link).expect("accepted");
    assert_eq!(resolved, dir.canonicalize().expect("resolved"));
    let mode = std::fs::metadata(&resolved)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");

    // The same link, belonging to another user: in a sticky directory they may not touch
    // ours, but theirs they may point at another directory of ours (one a plugin may write)
    // after the check, and the next load would read entries there. Only root can hand a link
    // to another user.
    if std::os::unix::fs::lchown(&link, Some(65534), None).is_err() {
        eprintln!("skipped: cannot give the link to another user (not root)");
        return;
    }
    let refused = PluginHost::check_cache_dir(&link).expect_err("refused");
    assert!(
        refused.contains("is a link belonging to user 65534") && refused.contains("/link"),
        "{refused}"
    );
    // A link of ours to their link is no better.
    let ours = shared.join("ours");
    std::os::unix::fs::symlink(&link, &ours).expect("link");
    let refused = PluginHost::check_cache_dir(&ours).expect_err("refused");
    assert!(refused.contains("belonging to user 65534"), "{refused}");
}
