//! A directory of plugins: every `*.wasm` file with its policy; bad files reported and
//! skipped; links leaving the directory refused; clashing tool names refuse both plugins.

use std::os::unix::fs::symlink;

use llm_worker::*;
use llm_worker_tests::{host, plugin_path, scratch_dir};

#[tokio::test]
async fn a_directory_loads_the_good_plugins_and_reports_the_rest() {
    let dir = scratch_dir("dir");
    let outside = scratch_dir("dir-outside");
    for name in ["greet", "counter", "calc"] {
        std::fs::copy(plugin_path(name), dir.join(format!("{name}.wasm"))).expect("copy");
    }
    std::fs::copy(plugin_path("greet"), dir.join("hello.wasm")).expect("copy");
    std::fs::write(dir.join("broken.wasm"), b"not wasm at all").expect("write");
    std::fs::write(dir.join("notes.txt"), b"not a plugin").expect("write");
    std::fs::create_dir(dir.join("nested")).expect("mkdir");
    std::fs::copy(plugin_path("notes"), dir.join("nested/notes.wasm")).expect("copy");
    std::fs::copy(plugin_path("text"), outside.join("text.wasm")).expect("copy");
    symlink(outside.join("text.wasm"), dir.join("escape.wasm")).expect("symlink");
    symlink(dir.join("calc.wasm"), dir.join("calc-link.wasm")).expect("symlink");

    let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = loaded.plugins.iter().map(LoadedPlugin::name).collect();
    assert_eq!(names, ["counter"], "only the plugin without problems loads");

    let messages: Vec<String> = loaded.failures.iter().map(ToString::to_string).collect();
    let find = |needle: &str| {
        messages
            .iter()
            .find(|m| m.contains(needle))
            .unwrap_or_else(|| panic!("no failure mentions {needle}: {messages:#?}"))
    };
    assert!(find("broken.wasm").contains("not a WebAssembly file"));
    assert!(find("escape.wasm").contains("outside the plugin directory"));
    let clash = find("hello.wasm");
    assert!(
        clash.contains("greet.wasm") && clash.contains("'greet'"),
        "{clash}"
    );
    assert!(
        loaded
            .failures
            .iter()
            .filter(|f| matches!(f, PluginError::ToolNameClash { .. }))
            .count()
            == 4,
        "greet/hello and calc/calc-link each refuse both: {messages:#?}"
    );
    assert!(
        !messages.iter().any(|m| m.contains("nested")),
        "not recursive"
    );

    let mut worker = Worker::new();
    worker
        .register_tools(loaded.definitions())
        .expect("registers");
    assert_eq!(
        worker
            .tool_server_handle()
            .call_tool("count", "{}")
            .await
            .as_deref(),
        Ok("0")
    );
}

#[test]
fn a_missing_directory_is_an_error() {
    let error = host().load_dir("/no/such/plugin/dir").expect_err("missing");
    assert!(error.to_string().contains("/no/such/plugin/dir"), "{error}");
}

#[test]
fn progress_is_reported_for_every_file() {
    let dir = scratch_dir("dir-progress");
    for name in ["greet", "counter"] {
        std::fs::copy(plugin_path(name), dir.join(format!("{name}.wasm"))).expect("copy");
    }
    std::fs::write(dir.join("zz-broken.wasm"), b"x").expect("write");
    let mut seen = Vec::new();
    let loaded = host()
        .load_dir_with(&dir, LoadDirOptions::default(), |index, total, path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            seen.push((index, total, name.unwrap_or_default()));
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        seen,
        [
            (0, 3, "counter.wasm".to_owned()),
            (1, 3, "greet.wasm".to_owned()),
            (2, 3, "zz-broken.wasm".to_owned())
        ]
    );
    assert_eq!(loaded.plugins.len(), 2);
    assert_eq!(loaded.failures.len(), 1);
}

#[test]
fn subdirectories_are_read_only_when_asked() {
    let dir = scratch_dir("dir-recursive");
    std::fs::copy(plugin_path("greet"), dir.join("greet.wasm")).expect("copy");
    std::fs::create_dir_all(dir.join("more/deeper")).expect("mkdir");
    std::fs::copy(plugin_path("counter"), dir.join("more/deeper/counter.wasm")).expect("copy");
    let outside = scratch_dir("dir-recursive-outside");
    std::fs::copy(plugin_path("calc"), outside.join("calc.wasm")).expect("copy");
    symlink(&outside, dir.join("linked")).expect("symlink a directory");

    let flat = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    let names = |loaded: &PluginDir| -> Vec<String> {
        loaded.plugins.iter().map(|p| p.name().to_owned()).collect()
    };
    assert_eq!(names(&flat), ["greet"]);
    let deep = host()
        .load_dir_with(
            &dir,
            LoadDirOptions::default().recursive(true),
            |_, _, _| {},
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        names(&deep),
        ["greet", "counter"],
        "links to directories are not followed"
    );
    assert!(deep.failures.is_empty(), "{:?}", deep.failures);
}

/// Two plugins offering the same resource URI (contract 0.3.0) are refused like two offering
/// the same tool name: both, each naming the other and the URI. So are a fixed URI of one and
/// a template of the other that matches it, and two templates some URI matches both (reads of
/// `notes://note/7` were "offered by two plugins", and a plugin added under `--watch` took a
/// served one's reads away).
#[test]
fn plugins_offering_the_same_resource_are_both_refused() {
    for (other, uri) in [
        ("shadow", "notes://all"),
        ("lookalike", "notes://note/7"),
        ("overlap", "notes://"),
    ] {
        resource_clash(other, uri);
    }
}

/// The two clashes over a `kind` of offering in `loaded`, where only counter loaded.
fn clashes_only_counter_survives(loaded: &PluginDir, kind: &str) -> Vec<String> {
    let names: Vec<&str> = loaded.plugins.iter().map(LoadedPlugin::name).collect();
    assert_eq!(names, ["counter"]);
    let clashes: Vec<String> = loaded
        .failures
        .iter()
        .filter(|f| matches!(f, PluginError::OfferingClash { kind: clash, .. } if *clash == kind))
        .map(ToString::to_string)
        .collect();
    assert_eq!(clashes.len(), 2, "{:#?}", loaded.failures);
    clashes
}

fn resource_clash(other: &str, uri: &str) {
    let root = scratch_dir("resource-clash");
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    for plugin in ["notes", other, "counter"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    for clash in &clashes_only_counter_survives(&loaded, "resource") {
        assert!(
            clash.contains("notes.wasm")
                && clash.contains(&format!("{other}.wasm"))
                && clash.contains(&format!("the resource '{uri}")),
            "{clash}"
        );
    }
}

/// Loaded recursively, two plugins of the same name in two subdirectories would share all that
/// goes by a plugin's name (the grants of an access policy, whose resource a content names,
/// audit records): both are refused, each naming the other.
#[test]
fn two_plugins_of_one_name_in_a_recursive_load_are_both_refused() {
    let dir = scratch_dir("name-clash");
    for (subdir, plugin) in [("team", "notes"), ("vendor", "greet")] {
        std::fs::create_dir(dir.join(subdir)).expect("mkdir");
        std::fs::copy(plugin_path(plugin), dir.join(subdir).join("notes.wasm")).expect("copy");
    }
    std::fs::copy(plugin_path("counter"), dir.join("counter.wasm")).expect("copy");
    let loaded = host()
        .load_dir_with(
            &dir,
            LoadDirOptions::default().recursive(true),
            |_, _, _| {},
        )
        .unwrap_or_else(|e| panic!("{e}"));
    for clash in &clashes_only_counter_survives(&loaded, "plugin name") {
        assert!(
            clash.contains("team/notes.wasm")
                && clash.contains("vendor/notes.wasm")
                && clash.contains("the plugin name 'notes'"),
            "{clash}"
        );
    }
}

/// A policy file that is a link out of the plugin directory is refused like a plugin file that
/// is one (the file it leads to could be one a plugin may write); a link inside is followed.
#[test]
fn a_policy_linked_from_outside_the_directory_is_refused() {
    let root = scratch_dir("policy-link");
    let (dir, outside) = (root.join("plugins"), root.join("elsewhere"));
    for made in [&dir, &outside, &dir.join("policies")] {
        std::fs::create_dir(made).expect("mkdir");
    }
    for plugin in ["greet", "counter"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    for policy in [
        outside.join("greet.toml"),
        dir.join("policies/counter.toml"),
    ] {
        std::fs::write(&policy, "[limits]\nmemory_mib = 16\n").expect("policy");
    }
    symlink(outside.join("greet.toml"), dir.join("greet.policy.toml")).expect("symlink");
    symlink(
        dir.join("policies/counter.toml"),
        dir.join("counter.policy.toml"),
    )
    .expect("symlink");
    let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = loaded.plugins.iter().map(LoadedPlugin::name).collect();
    assert_eq!(names, ["counter"], "{:#?}", loaded.failures);
    let message = loaded.failures[0].to_string();
    assert!(
        message.contains("greet.policy.toml")
            && message.contains("outside the plugin directory")
            && message.contains("elsewhere/greet.toml"),
        "{message}"
    );
    // A link leading nowhere (yet: a plugin that may write `elsewhere` can make the file
    // appear between the check and the read) was taken for "no policy" and skipped the check;
    // it is refused, and a file that appears is refused on the file opened.
    std::fs::remove_file(dir.join("greet.policy.toml")).expect("unlink");
    symlink(outside.join("later.toml"), dir.join("greet.policy.toml")).expect("symlink");
    let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = loaded.plugins.iter().map(LoadedPlugin::name).collect();
    assert_eq!(names, ["counter"], "{:#?}", loaded.failures);
    assert!(
        loaded.failures[0].to_string().contains("greet.policy.toml"),
        "{}",
        loaded.failures[0]
    );
}

/// A policy file reached through a link into a read-write grant (inside the plugin directory,
/// loaded without `--recursive`): the plugin with the grant could rewrite it, to grant the
/// policy's plugin more at the next load. The plugin whose policy it is is refused, naming the
/// grant and its plugin; the plugin with the grant loads.
#[test]
fn a_policy_in_a_read_write_grant_is_refused() {
    let dir = scratch_dir("policy-in-grant");
    let conf = dir.join("conf");
    std::fs::create_dir(&conf).expect("mkdir");
    for plugin in ["greet", "counter"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    std::fs::write(conf.join("counter.toml"), "[limits]\nmemory_mib = 16\n").expect("policy");
    symlink(conf.join("counter.toml"), dir.join("counter.policy.toml")).expect("symlink");
    let grant = |mode: &str| {
        std::fs::write(
            dir.join("greet.policy.toml"),
            format!(
                "[[dirs]]\nhost = {:?}\nguest = \"/conf\"\nmode = \"{mode}\"\n",
                conf.display().to_string()
            ),
        )
        .expect("policy");
    };
    grant("rw");
    let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = loaded.plugins.iter().map(LoadedPlugin::name).collect();
    assert_eq!(names, ["greet"], "{:#?}", loaded.failures);
    let message = loaded.failures[0].to_string();
    assert!(
        message.contains("counter.policy.toml")
            && message.contains("a read-write directory of plugin")
            && message.contains("greet.wasm")
            && message.contains("read-only"),
        "{message}"
    );
    // Read-only, the grant is harmless: both load.
    grant("ro");
    let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.plugins.len(), 2, "{:#?}", loaded.failures);
    // A plugin file that is such a link is refused the same way.
    grant("rw");
    std::fs::remove_file(dir.join("counter.policy.toml")).expect("unlink");
    std::fs::rename(dir.join("counter.wasm"), conf.join("counter.wasm")).expect("move");
    symlink(conf.join("counter.wasm"), dir.join("counter.wasm")).expect("symlink");
    let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = loaded.plugins.iter().map(LoadedPlugin::name).collect();
    assert_eq!(names, ["greet"], "{:#?}", loaded.failures);
    assert!(
        loaded.failures[0].to_string().contains("could rewrite it"),
        "{}",
        loaded.failures[0]
    );
}

/// One plugin's read-write grant holding the way to another's grant: the first could rename
/// the other's directory and put a link to any directory in its place, which the next load
/// would grant the second. The second is refused, however its path is written, before and
/// after the link is put there; grants apart load.
#[test]
fn a_grant_another_plugin_could_redirect_is_refused() {
    let root = scratch_dir("grant-way");
    let dir = root.join("plugins");
    for made in [
        "plugins",
        "shared",
        "shared/docs",
        "secret",
        "secret/inner",
        "apart",
    ] {
        std::fs::create_dir(root.join(made)).expect("mkdir");
    }
    symlink(root.join("shared"), root.join("via")).expect("symlink");
    for plugin in ["greet", "counter"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    let grant = |plugin: &str, host: &str, mode: &str| {
        std::fs::write(
            dir.join(format!("{plugin}.policy.toml")),
            format!("[[dirs]]\nhost = \"{host}\"\nguest = \"/data\"\nmode = \"{mode}\"\n"),
        )
        .expect("policy");
    };
    grant("greet", "../shared", "rw");
    let only_greet = |written: &str| {
        let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = loaded.plugins.iter().map(LoadedPlugin::name).collect();
        assert_eq!(names, ["greet"], "{written}: {:#?}", loaded.failures);
        let message = loaded.failures[0].to_string();
        assert!(
            message.contains("counter.policy.toml")
                && message.contains("dirs[0].host")
                && message.contains(written)
                && message.contains("greet.wasm")
                && message.contains("read-write"),
            "{message}"
        );
    };
    // Inside the other's grant, as written and as resolved; then written through a link.
    grant("counter", "../shared/docs", "ro");
    only_greet("shared/docs");
    grant("counter", "../via/docs", "ro");
    only_greet("shared/docs");
    // Greet has put a link in the way: the grant resolves elsewhere, but it is still in the
    // way of greet's grant as written.
    std::fs::rename(root.join("shared/docs"), root.join("shared/old")).expect("rename");
    symlink("../secret", root.join("shared/docs")).expect("symlink");
    grant("counter", "../shared/docs", "ro");
    only_greet("shared/docs");
    // Through the link and back out with `..`: written `shared/docs/../../apart`, which
    // reads as `apart` with the `..` taken out, but leads through greet's directory.
    std::fs::remove_file(root.join("shared/docs")).expect("unlink");
    symlink("../secret/inner", root.join("shared/docs")).expect("symlink");
    grant("counter", "../shared/docs/../../apart", "ro");
    only_greet("shared/docs/../../apart");
    // A chain: `alias` (apart from greet's grant) -> `shared/current` -> `apart`. Counter's
    // grant of `alias` is outside `shared` as written and as resolved, but greet may change
    // `current`, which the next load follows.
    std::fs::remove_file(root.join("shared/docs")).expect("unlink");
    symlink("../apart", root.join("shared/current")).expect("symlink");
    symlink("shared/current", root.join("alias")).expect("symlink");
    grant("counter", "../alias", "ro");
    only_greet("alias");
    std::fs::remove_file(root.join("shared/current")).expect("unlink");
    // The same directory shared, or a directory apart, loads.
    for host_dir in ["../shared", "../apart"] {
        grant("counter", host_dir, "ro");
        let loaded = host().load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            loaded.plugins.len(),
            2,
            "{host_dir}: {:#?}",
            loaded.failures
        );
    }
}
