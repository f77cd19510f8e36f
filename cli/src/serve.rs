//! `llm-worker serve`: the tools of a plugin directory over MCP, on stdio (one session) or
//! streamable HTTP (a session per client), with `--watch` reaching every open session.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use llm_worker::mcp::{HttpOptions, McpOptions, ToolCatalog, ToolGroup};
use llm_worker::{LOCK_FILE, LoadDirOptions, LockFile, PluginDir, PluginError, SandboxPolicy};

use super::Loader;

/// How often `--watch` looks at the directory.
const WATCH_INTERVAL: Duration = Duration::from_millis(300);

/// The options of `serve` besides the directory.
pub(crate) struct ServeOptions {
    pub(crate) watch: bool,
    pub(crate) http: Option<String>,
    pub(crate) token_file: Option<PathBuf>,
    pub(crate) no_auth: bool,
    pub(crate) max_sessions: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) allowed_hosts: Vec<String>,
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) session_prefix: Option<String>,
}

/// What a file looked like at the last scan: size, modification time and identity, to notice
/// that something may have changed (what changed is decided by content).
type Stat = (u64, Option<SystemTime>, u64);

/// A plugin file and its policy at the last scan.
type Fingerprint = [Stat; 2];

fn stat(path: &Path) -> Stat {
    #[cfg(unix)]
    let identity = |m: &std::fs::Metadata| std::os::unix::fs::MetadataExt::ino(m);
    #[cfg(not(unix))]
    let identity = |_: &std::fs::Metadata| 0;
    std::fs::metadata(path)
        .map(|m| (m.len(), m.modified().ok(), identity(&m)))
        .unwrap_or((0, None, 0))
}

/// The plugin files of `dir` with their policies, and its lock file (an update written by
/// `llm-worker lock`, or a lock that is removed or replaced, is a change to act on too).
#[derive(PartialEq)]
struct Scan {
    plugins: BTreeMap<PathBuf, Fingerprint>,
    lock: Option<Stat>,
}

fn scan(dir: &Path, options: LoadDirOptions) -> Scan {
    let lock = dir.join(LOCK_FILE);
    Scan {
        plugins: options
            .plugin_files(dir)
            .unwrap_or_default()
            .into_iter()
            .map(|path| {
                let print = [stat(&path), stat(&SandboxPolicy::path_for(&path))];
                (path, print)
            })
            .collect(),
        lock: std::fs::symlink_metadata(&lock)
            .is_ok()
            .then(|| stat(&lock)),
    }
}

/// The served plugins, by file: a plugin whose new version fails to load keeps its working
/// version; a removed file goes.
#[derive(Default)]
struct Served {
    groups: BTreeMap<PathBuf, ToolGroup>,
    /// The problems reported at the last load, so that a rescan does not repeat them.
    reported: std::collections::BTreeSet<String>,
}

impl Served {
    fn update(&mut self, loaded: PluginDir, present: &Scan) {
        self.groups
            .retain(|path, _| present.plugins.contains_key(path));
        for plugin in &loaded.plugins {
            let group = ToolGroup::plugin(plugin);
            let path = plugin.path().to_owned();
            if self
                .groups
                .get(&path)
                .is_none_or(|old| old.revision() != group.revision())
            {
                tracing::info!(plugin = %path.display(), "serving plugin");
                self.groups.insert(path, group);
            }
        }
        let mut problems = std::collections::BTreeSet::new();
        for failure in &loaded.failures {
            let problem = match failure {
                // Two plugins offering one tool are both refused by a fresh load; while
                // serving, the one served already keeps serving, and only the other is out.
                PluginError::ToolNameClash {
                    path, other, tool, ..
                } if self.groups.contains_key(path) && self.groups.contains_key(other) => {
                    format!(
                        "plugins {} and {} both offer the tool '{tool}' now: the versions served \
                         before keep serving until one is renamed or removed",
                        path.min(other).display(),
                        path.max(other).display()
                    )
                }
                PluginError::ToolNameClash { path, .. } if self.groups.contains_key(path) => {
                    continue;
                }
                PluginError::ToolNameClash {
                    path, other, tool, ..
                } if self.groups.contains_key(other) => {
                    format!(
                        "plugin {} is not served: its tool '{tool}' is served by {} already; \
                         rename or remove one of them",
                        path.display(),
                        other.display()
                    )
                }
                failure => failure.to_string(),
            };
            problems.insert(problem);
        }
        for problem in problems.difference(&self.reported) {
            tracing::warn!("{problem}");
        }
        self.reported = problems;
    }

    fn groups(&self) -> Vec<ToolGroup> {
        self.groups.values().cloned().collect()
    }
}

/// Serves the plugins of `dir` until the client disconnects (stdio) or the server fails
/// (HTTP).
pub(crate) async fn serve(
    loader: Loader,
    dir: PathBuf,
    options: ServeOptions,
) -> Result<(), String> {
    let present = scan(&dir, loader.options);
    let loaded = super::load_with_progress(&loader, &dir)?;
    // A directory locked now stays locked: a reload that finds the lock gone refuses every
    // change and keeps serving what was approved.
    let mut loader = loader;
    if !loader.options.locked && matches!(LockFile::read(&dir), Ok(Some(_))) {
        loader.options = loader.options.locked(true);
    }
    super::warn_about(&loaded, &dir, loader.options);
    let mut served = Served::default();
    served.update(loaded, &present);
    let catalog = ToolCatalog::new(served.groups());
    let mcp = McpOptions::new("llm-worker", env!("CARGO_PKG_VERSION")).instructions(format!(
        "Tools from the WebAssembly plugins in {}, run in a sandbox by llm-worker.",
        dir.display()
    ));
    if options.watch {
        tokio::spawn(watch_dir(loader, dir, served, present, catalog.clone()));
    }
    let Some(address) = options.http else {
        return llm_worker::mcp::serve_stdio(catalog, mcp)
            .await
            .map_err(|e| e.to_string());
    };
    let listener = bind(&address).await?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {address}: {e}"))?;
    let loopback = local.ip().is_loopback();
    if options.no_auth && !loopback {
        return Err(format!(
            "--no-auth is for loopback addresses only, and {local} is not one: anyone who can \
             reach it could run the tools; give bearer tokens with --token-file FILE"
        ));
    }
    // Clients learn how to authenticate here; the token itself goes to the terminal of the
    // user who started the server (as Jupyter prints its URL), never to a log file of ours.
    let (tokens, how) = match (&options.token_file, options.no_auth) {
        (Some(path), _) => (
            read_tokens(path)?,
            format!(
                "clients send `Authorization: Bearer TOKEN` with a token of {}",
                path.display()
            ),
        ),
        (None, true) => (
            Vec::new(),
            "no token needed (--no-auth): every local user can call every tool".to_owned(),
        ),
        (None, false) if loopback => {
            let path = llm_worker::mcp::default_token_path().ok_or(
                "cannot keep a token: neither XDG_STATE_HOME nor HOME is set; give \
                 --token-file FILE, or --no-auth",
            )?;
            let token = llm_worker::mcp::persistent_token(&path).map_err(|e| e.to_string())?;
            let how = format!(
                "clients send `Authorization: Bearer {token}` (kept in {}; --token-file FILE \
                 gives your own, --no-auth none)",
                path.display()
            );
            (vec![token], how)
        }
        (None, false) => {
            return Err(format!(
                "refusing to serve on {local} without authentication: anyone who can reach it \
                 could run the tools. Put bearer tokens in a file, one per line, and add \
                 `--token-file FILE`; or serve on 127.0.0.1"
            ));
        }
    };
    let mut http = HttpOptions::default()
        .tokens(tokens)
        .no_auth(options.no_auth)
        .max_sessions(options.max_sessions)
        .idle_timeout(options.idle_timeout)
        .allowed_hosts(options.allowed_hosts)
        .allowed_origins(options.allowed_origins);
    if let Some(prefix) = options.session_prefix {
        http = http.session_prefix(prefix);
    }
    eprintln!("llm-worker: {how}");
    // Clients (and tests) read the address from here, e.g. when the port was 0.
    eprintln!("llm-worker: serving MCP on http://{local}/");
    llm_worker::mcp::serve_http(listener, catalog, mcp, http)
        .await
        .map_err(|e| e.to_string())
}

/// Listens on `address` (`HOST:PORT`; a name is resolved, the first address that binds wins).
async fn bind(address: &str) -> Result<tokio::net::TcpListener, String> {
    let candidates: Vec<std::net::SocketAddr> = tokio::net::lookup_host(address)
        .await
        .map_err(|e| {
            format!("cannot resolve {address:?} (give HOST:PORT, e.g. 127.0.0.1:8080): {e}")
        })?
        .collect();
    let mut last = None;
    for candidate in candidates {
        match tokio::net::TcpListener::bind(candidate).await {
            Ok(listener) => return Ok(listener),
            Err(error) => last = Some(format!("cannot listen on {candidate}: {error}")),
        }
    }
    Err(last.unwrap_or_else(|| format!("{address:?} resolves to no address")))
}

/// The bearer tokens of a token file: one per line; blank lines and `#` comments ignored.
fn read_tokens(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    let tokens: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if tokens.is_empty() {
        return Err(format!(
            "the token file {} holds no token; put one token per line",
            path.display()
        ));
    }
    #[cfg(unix)]
    if let Ok(metadata) = std::fs::metadata(path) {
        use std::os::unix::fs::PermissionsExt;
        if metadata.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                "the token file {} may be read by other users; run `chmod 600` on it",
                path.display()
            );
        }
    }
    Ok(tokens)
}

async fn watch_dir(
    loader: Loader,
    dir: PathBuf,
    mut served: Served,
    mut present: Scan,
    catalog: ToolCatalog,
) {
    // The last reload's error, said once (until the directory changes again).
    let mut refused: Option<String> = None;
    loop {
        tokio::time::sleep(WATCH_INTERVAL).await;
        let now = scan(&dir, loader.options);
        if now == present {
            continue;
        }
        let (host, options, path) = (loader.host.clone(), loader.options, dir.clone());
        let loaded = match tokio::task::spawn_blocking(move || {
            host.load_dir_with(path, options, |_, _, _| {})
        })
        .await
        {
            Ok(Ok(loaded)) => loaded,
            Ok(Err(error)) => {
                // The lock is gone, untrusted or unreadable (or the directory is): nothing
                // changes, the approved versions keep serving.
                let message = format!("{error}; still serving the plugins loaded before");
                if refused.as_ref() != Some(&message) {
                    tracing::warn!("{message}");
                }
                refused = Some(message);
                present = now;
                continue;
            }
            Err(_) => continue,
        };
        refused = None;
        present = now;
        served.update(loaded, &present);
        // Sessions keep the instances of groups whose revision (content) is unchanged, and
        // tell their clients only if their tools changed.
        catalog.replace(served.groups());
    }
}
