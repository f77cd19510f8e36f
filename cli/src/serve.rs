//! `llm-worker serve`: the tools of a plugin directory over MCP, on stdio (one session) or
//! streamable HTTP (a session per client), with `--watch` reaching every open session.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use llm_worker::mcp::{DirSnapshot, DirWatcher, HttpOptions, McpOptions, ToolCatalog};

use crate::load::Loader;

/// The options of `serve` besides the directory.
pub(crate) struct ServeOptions {
    pub(crate) watch: bool,
    pub(crate) http: Option<String>,
    pub(crate) token_file: Option<PathBuf>,
    pub(crate) no_auth: bool,
    pub(crate) oauth: Option<OAuthArgs>,
    pub(crate) max_sessions: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_request_memory: usize,
    pub(crate) allowed_hosts: Vec<String>,
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) session_prefix: Option<String>,
    pub(crate) task_ttl: Duration,
    pub(crate) request_state_key_file: Option<PathBuf>,
    pub(crate) audit_log: Option<PathBuf>,
    pub(crate) audit_inputs: bool,
    pub(crate) metrics: Option<String>,
    pub(crate) otlp_endpoint: Option<String>,
}

/// `--oauth-issuer`, `--oauth-resource` and `--oauth-scope`.
pub(crate) struct OAuthArgs {
    pub(crate) issuers: Vec<String>,
    pub(crate) resource: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) untyped_tokens: bool,
    pub(crate) client_identities: bool,
    /// The introspection endpoint, client id and secret file.
    pub(crate) introspection: Option<(String, String, PathBuf)>,
}

/// Serves the plugins of `dir` until the client disconnects (stdio) or the server fails
/// (HTTP).
pub(crate) async fn serve(
    loader: Loader,
    dir: PathBuf,
    options: ServeOptions,
) -> anyhow::Result<()> {
    let before = DirSnapshot::take(&dir, loader.options);
    let loaded = crate::load::load_with_progress(&loader, &dir)?;
    crate::load::warn_about(&loaded, &dir, loader.options);
    // A client would see no tools and no reason: said here, where the operator looks.
    if loaded.plugins.is_empty() && !loaded.failures.is_empty() {
        eprintln!(
            "warning: every plugin of {} was refused ({}, above): serving no tools; `llm-worker \
             check {}` says why each",
            dir.display(),
            loaded.failures.len(),
            dir.display()
        );
    }
    // A directory locked now stays locked: a reload that finds the lock gone refuses every
    // change and keeps serving what was approved.
    let mut watcher =
        DirWatcher::from_loaded(loader.host.clone(), &dir, loader.options, before, loaded)
            .task_ttl(options.task_ttl);
    let catalog = ToolCatalog::new(watcher.groups());
    // Clients are not told where the plugins are on this machine.
    let mut mcp = McpOptions::new("llm-worker", env!("CARGO_PKG_VERSION"))
        .instructions("Tools from WebAssembly plugins, each run in a sandbox by llm-worker.");
    if let Some(file) = &options.request_state_key_file {
        mcp = mcp.request_state_key(&llm_worker::mcp::read_request_state_key(file)?)?;
    }
    if let Some(path) = &options.audit_log {
        let log = if path.as_os_str() == "-" {
            llm_worker::mcp::AuditLog::to_stderr()
        } else {
            llm_worker::mcp::AuditLog::to_file(path)?
        };
        mcp = mcp.audit(log.with_inputs(options.audit_inputs));
    }
    let traces = match &options.otlp_endpoint {
        Some(endpoint) => {
            mcp = mcp.traces(true);
            Some(crate::traces::export_to(endpoint)?)
        }
        None => None,
    };
    if let Some(address) = &options.metrics {
        let metrics = llm_worker::mcp::Metrics::new().host(&loader.host);
        let listener = bind(address).await?;
        let local = listener
            .local_addr()
            .with_context(|| format!("cannot listen on {address}"))?;
        // Scrapers (and tests) read the address from here, e.g. when the port was 0.
        eprintln!("llm-worker: metrics on http://{local}/metrics");
        if local.ip().is_unspecified() {
            tracing::warn!(
                "--metrics {address} listens on every interface, and the metrics are served \
                 to anyone who reaches the port (they name the plugins and tools served, and \
                 when they are used): give a private or loopback address, or keep the port \
                 behind a firewall only your scraper passes"
            );
        }
        tokio::spawn(llm_worker::mcp::serve_metrics(listener, metrics.clone()));
        watcher = watcher.metrics(metrics.clone());
        mcp = mcp.metrics(metrics);
    }
    // Task ids carry the replica's prefix too: a balancer routes `tasks/*` (which name the
    // task in `Mcp-Name`) as it routes sessions.
    let task_prefix = options
        .session_prefix
        .as_deref()
        .map_or_else(|| "task-".to_owned(), |prefix| format!("{prefix}task-"));
    mcp.tasks = llm_worker::task::TaskStore::with_options(
        llm_worker::task::TaskOptions::default()
            .ttl(options.task_ttl)
            .prefix(task_prefix),
    );
    if options.watch {
        tokio::spawn(watcher.run(catalog.clone()));
    }
    let Some(address) = options.http else {
        // SIGINT or SIGTERM ends the session as the client's going does: the session's end
        // sets back what it changed of stdin and stdout (their non-blocking mode). The
        // signals are watched before the first message is read, so that no signal can come
        // while nothing watches them (and end the process with its modes left set).
        let shutdown = terminated();
        // Said once the signals are watched: from here a signal ends the session cleanly.
        tracing::info!("serving MCP on stdio");
        // Someone at a terminal, not a client: say what this is waiting for.
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            eprintln!(
                "serving MCP on stdio: waiting for an MCP client's messages on stdin (configure \
                 your client to start this command); Ctrl-C stops"
            );
        }
        llm_worker::mcp::serve_stdio_with_shutdown(catalog, mcp, shutdown).await?;
        if let Some(traces) = traces {
            let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
        }
        // The session has ended and the streams are set back. Exit now: the runtime would
        // wait for a blocking read of a terminal's stdin.
        tracing::debug!("the session ended");
        std::process::exit(0);
    };
    // Which identity may use which tools: the directory's access policy, as its lock
    // approved it.
    let access = llm_worker::mcp::AccessPolicy::read(&dir)?;
    // Under an access policy, a token's name is what its grants name: it must be written, not
    // taken from the token's place in the file.
    let per_identity = access.is_some();
    if let Some(policy) = access {
        if options.no_auth {
            bail!(
                "{} gives tools per identity, and --no-auth has none: give tokens \
                 (--token-file) or OAuth issuers (--oauth-issuer)",
                dir.join(llm_worker::mcp::ACCESS_FILE).display()
            );
        }
        if let Some(lock) = llm_worker::lock::LockFile::read(&dir)?
            && let Some(refusal) = lock.access_refusal(Some(&policy.sha256))
        {
            bail!("not serving {}: {refusal}", dir.display());
        }
        mcp = mcp.access(policy);
    } else if let Some(lock) = llm_worker::lock::LockFile::read(&dir)?
        && let Some(refusal) = lock.access_refusal(None)
    {
        bail!("not serving {}: {refusal}", dir.display());
    }
    let listener = bind(&address).await?;
    let local = listener
        .local_addr()
        .with_context(|| format!("cannot listen on {address}"))?;
    let loopback = local.ip().is_loopback();
    if options.no_auth && !loopback {
        bail!(
            "--no-auth is for loopback addresses only, and {local} is not one: anyone who can \
             reach it could run the tools; give bearer tokens with --token-file FILE"
        );
    }
    // Clients learn how to authenticate here; the token itself goes to the terminal of the
    // user who started the server (as Jupyter prints its URL), never to a log file of ours.
    let (tokens, how) = match (&options.token_file, options.no_auth) {
        (None, _) if options.oauth.is_some() => (
            Vec::new(),
            "clients send OAuth access tokens of the issuers given (--oauth-issuer)".to_owned(),
        ),
        (Some(path), _) => (
            if per_identity {
                llm_worker::mcp::read_named_token_file(path)?
            } else {
                llm_worker::mcp::read_token_file(path)?
            },
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
            let path = llm_worker::mcp::default_token_path().context(
                "cannot keep a token: neither XDG_STATE_HOME nor HOME is set; give \
                 --token-file FILE, or --no-auth",
            )?;
            let token = llm_worker::mcp::persistent_token(&path)?;
            // The token itself only to a person at a terminal: stderr under a service manager
            // or in a container goes to logs others read, which the private file keeps it
            // out of.
            let shown = if std::io::stderr().is_terminal() {
                token.clone()
            } else {
                "TOKEN".to_owned()
            };
            let how = format!(
                "clients send `Authorization: Bearer {shown}` (the token kept in {}; \
                 --token-file FILE gives your own, --no-auth none)",
                path.display()
            );
            (
                vec![llm_worker::mcp::BearerToken::new("token-1", token)],
                how,
            )
        }
        (None, false) => {
            bail!(
                "refusing to serve on {local} without authentication: anyone who can reach it \
                 could run the tools. Put bearer tokens in a file, one per line, and add \
                 `--token-file FILE`; or serve on 127.0.0.1"
            );
        }
    };
    let mut http = HttpOptions::default()
        .named_tokens(tokens)
        .no_auth(options.no_auth)
        .max_sessions(options.max_sessions)
        .idle_timeout(options.idle_timeout)
        .max_body_bytes(options.max_body_bytes)
        .max_request_memory(options.max_request_memory)
        .allowed_hosts(options.allowed_hosts)
        .allowed_origins(options.allowed_origins);
    if let Some(oauth) = options.oauth {
        let resource = url::Url::parse(&oauth.resource)
            .with_context(|| format!("--oauth-resource {:?} is not a URL", oauth.resource))?;
        if oauth.introspection.is_some() && oauth.issuers.len() != 1 {
            bail!("--oauth-introspection is for one --oauth-issuer: give exactly one");
        }
        let secret = match &oauth.introspection {
            Some((_, _, file)) => Some(llm_worker::mcp::read_secret_file(file)?),
            None => None,
        };
        let issuers: Vec<_> = oauth
            .issuers
            .into_iter()
            .map(|issuer| {
                let issuer = llm_worker::mcp::IssuerOptions::new(issuer);
                match (&oauth.introspection, &secret) {
                    (Some((endpoint, client, _)), Some(secret)) => {
                        issuer.introspection(endpoint.clone(), client.clone(), secret.clone())
                    }
                    _ => issuer,
                }
            })
            .collect();
        http = http.oauth(
            llm_worker::mcp::OAuthOptions::new(resource, issuers)
                .required_scopes(oauth.scopes)
                .untyped_tokens(oauth.untyped_tokens)
                .client_identities(oauth.client_identities),
        );
    }
    if let Some(prefix) = options.session_prefix {
        http = http.session_prefix(prefix);
    }
    eprintln!("llm-worker: {how}");
    // Clients (and tests) read the address from here, e.g. when the port was 0.
    eprintln!("llm-worker: serving MCP on http://{local}/");
    // SIGINT or SIGTERM stops the server gracefully (sessions end, requests finish), and the
    // spans not yet exported are sent.
    llm_worker::mcp::serve_http_with_shutdown(listener, catalog, mcp, http, terminated()).await?;
    if let Some(traces) = traces
        && let Ok(Err(error)) = tokio::task::spawn_blocking(move || traces.shutdown()).await
    {
        tracing::warn!("cannot send the last spans: {error}");
    }
    Ok(())
}

/// Listens on `address` (`HOST:PORT`; a name is resolved, the first address that binds wins).
async fn bind(address: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let candidates: Vec<std::net::SocketAddr> = tokio::net::lookup_host(address)
        .await
        .with_context(|| {
            format!("cannot resolve {address:?} (give HOST:PORT, e.g. 127.0.0.1:8080)")
        })?
        .collect();
    let mut last = None;
    for candidate in candidates {
        match tokio::net::TcpListener::bind(candidate).await {
            Ok(listener) => return Ok(listener),
            Err(error) => {
                last = Some(
                    anyhow::Error::new(error).context(format!("cannot listen on {candidate}")),
                );
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("{address:?} resolves to no address")))
}

/// Resolves at SIGINT or SIGTERM (at Ctrl-C elsewhere); never, if they cannot be watched.
/// The signals are watched from this call on, not from the future's first poll.
fn terminated() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let watched = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        );
        async move {
            let (Ok(mut interrupt), Ok(mut terminate)) = watched else {
                return std::future::pending().await;
            };
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
