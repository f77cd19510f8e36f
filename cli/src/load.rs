//! Loading a plugin directory for a command: the host built from the options, the progress
//! bar, and the warnings about what did not load.

use std::path::{Path, PathBuf};
use std::time::Duration;

use llm_worker::{Limits, LoadDirOptions, LoadedPlugin, PluginDir, PluginHost};

use crate::args::{DirArgs, HostArgs, PluginArgs};

/// The host and how it reads plugin directories.
pub(crate) struct Loader {
    pub(crate) host: PluginHost,
    pub(crate) options: LoadDirOptions,
}

/// The loader of a command that loads a directory to use its tools.
pub(crate) fn loader(args: &HostArgs) -> anyhow::Result<Loader> {
    loader_with(&args.plugins, &args.dir, args.pool, args.locked, &[])
}

/// The loader of `serve`, which refuses plugins granted a directory holding one of its
/// `secrets` (files it reads or writes: tokens, keys, the audit log).
pub(crate) fn serving_loader(args: &HostArgs, secrets: &[PathBuf]) -> anyhow::Result<Loader> {
    loader_with(&args.plugins, &args.dir, args.pool, args.locked, secrets)
}

/// The loader of the options a command takes: `pool` instance slots, `locked` to require a
/// lock file, `secrets` no plugin may be granted (besides the user's persistent HTTP token,
/// which no command's plugins may be).
pub(crate) fn loader_with(
    plugins: &PluginArgs,
    dir: &DirArgs,
    pool: Option<u32>,
    locked: bool,
    secrets: &[PathBuf],
) -> anyhow::Result<Loader> {
    let limits = Limits::default()
        // Within Limits::MEMORY_MIB (checked by clap): fits any usize of a 64-bit host.
        .memory_bytes(usize::try_from(plugins.memory_mib << 20).unwrap_or(usize::MAX))
        .call_timeout(Duration::from_millis(plugins.timeout_ms))
        .fuel(plugins.fuel);
    let cache = if plugins.no_cache {
        None
    } else {
        plugins
            .cache_dir
            .clone()
            .or_else(PluginHost::default_cache_dir)
    };
    let mut builder = PluginHost::builder()
        .limits(limits)
        .max_plugin_bytes(plugins.max_plugin_mib << 20);
    if let Some(dir) = cache {
        builder = builder.cache_dir(dir);
    }
    if let Some(slots) = pool.filter(|&slots| slots > 0) {
        builder = builder.instance_pool(slots);
    }
    for secret in secrets
        .iter()
        .cloned()
        .chain(llm_worker::mcp::default_token_path())
    {
        builder = builder.protect(secret);
    }
    let host = builder.build()?;
    Ok(Loader {
        host,
        options: LoadDirOptions::default()
            .recursive(dir.recursive)
            .include_build_dirs(dir.include_target)
            .locked(locked),
    })
}

/// Loads a directory (with a progress bar when stderr is a terminal), warning about refused
/// plugins, stray policy files and a directory without plugins.
pub(crate) fn load(loader: &Loader, dir: &Path) -> anyhow::Result<PluginDir> {
    let loaded = load_with_progress(loader, dir)?;
    for failure in &loaded.failures {
        tracing::warn!("{failure}");
    }
    warn_about(&loaded, dir, loader.options);
    Ok(loaded)
}

/// What a directory without `.wasm` files needs, for messages.
pub(crate) fn no_plugins(dir: &Path, options: LoadDirOptions) -> String {
    format!(
        "{} holds no plugins (no `.wasm` files{}); build plugins with `cargo build --release \
         --target wasm32-wasip2` and copy their `.wasm` files there (./scripts/demo.sh fills \
         target/demo-plugins with the examples)",
        dir.display(),
        if options.recursive {
            ", also in its subdirectories"
        } else {
            "; -r reads subdirectories"
        }
    )
}

/// Warns about policy files that belong to no plugin and about a directory without plugins.
pub(crate) fn warn_about(loaded: &PluginDir, dir: &Path, options: LoadDirOptions) {
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    if holds_no_plugins(loaded) {
        tracing::warn!("{}", no_plugins(dir, options));
    }
}

/// Whether a directory read holds no plugin files at all (none loaded, none refused).
pub(crate) fn holds_no_plugins(loaded: &PluginDir) -> bool {
    loaded.plugins.is_empty() && loaded.failures.is_empty()
}

/// A plugin's file as the user knows it: its path within the directory (`sub/counter.wasm`).
pub(crate) fn file_name(plugin: &LoadedPlugin, dir: &Path) -> String {
    let path = plugin.path();
    path.strip_prefix(dir)
        .ok()
        .or_else(|| path.file_name().map(Path::new))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Loads a directory, showing a progress bar on stderr when it is a terminal.
pub(crate) fn load_with_progress(loader: &Loader, dir: &Path) -> anyhow::Result<PluginDir> {
    use std::io::IsTerminal;
    let (host, options) = (&loader.host, loader.options);
    if !std::io::stderr().is_terminal() {
        return Ok(host.load_dir_with(dir, options, |_, _, _| {})?);
    }
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {wide_msg}") {
        bar.set_style(style);
    }
    let loaded = host.load_dir_with(dir, options, |index, total, path| {
        bar.set_length(total as u64);
        bar.set_position(index as u64);
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        // A file name is anyone's who may write the directory: shown escaped and on one line
        // (a line break in it could show a line of its own), as every text from outside is at
        // a terminal.
        bar.set_message(format!(
            "loading {}",
            llm_worker_rules::tool::OneLine(&name)
        ));
    });
    bar.finish_and_clear();
    Ok(loaded?)
}
