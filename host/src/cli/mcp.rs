//! `llm-worker serve`: the tools of a plugin directory as an MCP server over stdio. One
//! connection is one session: one instance per plugin, state kept between calls. With
//! `--watch`, added, changed and removed plugin files are picked up while serving.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use llm_worker::{
    LoadDirOptions, PluginDir, SandboxPolicy, ToolDefinition, ToolServerError, ToolServerHandle,
    Worker,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, ServerNotification, Tool,
    ToolListChangedNotification,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

/// How often `--watch` looks at the directory.
const WATCH_INTERVAL: Duration = Duration::from_millis(300);

/// Serves a worker's tools; the tool set can be swapped while serving.
#[derive(Clone)]
pub(crate) struct McpServer {
    tools: Arc<RwLock<ToolServerHandle>>,
    instructions: String,
    watch: bool,
}

impl McpServer {
    fn tools(&self) -> ToolServerHandle {
        self.tools.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.watch {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
        let mut info = ServerConfig::new(capabilities);
        info.instructions = Some(self.instructions.clone());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .tools()
            .tool_definitions_sorted()
            .into_iter()
            .map(|definition| {
                let schema = match definition.input_schema {
                    Value::Object(schema) => schema,
                    _ => serde_json::Map::new(),
                };
                Tool::new(definition.name, definition.description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let input = Value::Object(request.arguments.unwrap_or_default()).to_string();
        match self.tools().call_tool(&request.name, &input).await {
            Ok(output) => Ok(CallToolResult::success(vec![ContentBlock::text(output)]).into()),
            Err(ToolServerError::ToolNotFound(name)) => Err(ErrorData::invalid_params(
                format!("no tool named '{name}'; call tools/list for the tools"),
                None,
            )),
            // A tool's failure is a result the model can read, not a protocol error.
            Err(error) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(error.to_string())]).into())
            }
        }
    }
}

/// What a plugin file looked like when it was loaded: its size and modification time, and
/// those of its policy file.
type Fingerprint = [(u64, Option<SystemTime>); 2];

fn fingerprint(path: &Path) -> Fingerprint {
    let stat = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| (m.len(), m.modified().ok()))
            .unwrap_or((0, None))
    };
    [stat(path), stat(&SandboxPolicy::path_for(path))]
}

/// The served plugins: their fingerprints and the definitions of this session (registering a
/// definition again reuses its instance, so unchanged plugins keep their state).
#[derive(Default)]
struct Served {
    plugins: BTreeMap<PathBuf, (Fingerprint, Vec<ToolDefinition>)>,
}

impl Served {
    /// Takes in a fresh load of the directory: new and changed plugins that loaded replace
    /// the old ones; a changed plugin that no longer loads keeps its working version; removed
    /// files go. Returns whether anything changed.
    fn update(&mut self, loaded: PluginDir, present: &BTreeMap<PathBuf, Fingerprint>) -> bool {
        let mut changed = false;
        let before = self.plugins.len();
        self.plugins.retain(|path, _| present.contains_key(path));
        changed |= self.plugins.len() != before;
        for plugin in loaded.plugins {
            let path = plugin.path().to_owned();
            let Some(print) = present.get(&path) else {
                continue;
            };
            match self.plugins.get(&path) {
                Some((old, _)) if old == print => {}
                _ => {
                    tracing::info!(plugin = %path.display(), "serving plugin");
                    self.plugins.insert(path, (*print, plugin.definitions()));
                    changed = true;
                }
            }
        }
        for failure in loaded.failures {
            tracing::warn!("{failure}");
        }
        changed
    }

    /// A tool server with every served plugin; a plugin whose tool names clash with one
    /// already registered is left out (and logged).
    fn tools(&self) -> ToolServerHandle {
        let mut worker = Worker::new();
        for (path, (_, definitions)) in &self.plugins {
            if let Err(error) = worker.register_tools(definitions.iter().cloned()) {
                tracing::warn!(plugin = %path.display(), "not served: {error}");
            }
        }
        worker.tool_server_handle()
    }
}

fn scan(dir: &Path, options: LoadDirOptions) -> BTreeMap<PathBuf, Fingerprint> {
    options
        .plugin_files(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|path| {
            let print = fingerprint(&path);
            (path, print)
        })
        .collect()
}

/// Serves the plugins of `dir` over streamable HTTP on `address` until the process ends. The
/// process is one session: every client request reaches the same instances.
pub(crate) async fn serve_http(
    loader: &super::Loader,
    dir: PathBuf,
    address: std::net::SocketAddr,
) -> Result<(), String> {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };

    if !address.ip().is_loopback() {
        return Err(format!(
            "{address} is not a local address; serve on 127.0.0.1 or [::1] (the server has no \
             authentication)"
        ));
    }
    let loaded = super::load_with_progress(loader, &dir)?;
    let mut served = Served::default();
    served.update(loaded, &scan(&dir, loader.options));
    let server = McpServer {
        tools: Arc::new(RwLock::new(served.tools())),
        instructions: format!(
            "Tools from the WebAssembly plugins in {}, run in a sandbox by llm-worker.",
            dir.display()
        ),
        watch: false,
    };
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot listen on {address}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {address}: {e}"))?;
    // Clients (and tests) read the address from here, e.g. when the port was 0.
    eprintln!("llm-worker: serving MCP on http://{local}/");
    loop {
        let (stream, _) = listener
            .accept()
            .await
            .map_err(|e| format!("cannot accept a connection: {e}"))?;
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!("HTTP connection ended: {error}");
            }
        });
    }
}

/// Serves the plugins of `dir` over stdio until the client disconnects.
pub(crate) async fn serve(loader: super::Loader, dir: PathBuf, watch: bool) -> Result<(), String> {
    let present = scan(&dir, loader.options);
    let loaded = super::load_with_progress(&loader, &dir)?;
    let mut served = Served::default();
    served.update(loaded, &present);
    let tools = Arc::new(RwLock::new(served.tools()));
    let server = McpServer {
        tools: Arc::clone(&tools),
        instructions: format!(
            "Tools from the WebAssembly plugins in {}, run in a sandbox by llm-worker.",
            dir.display()
        ),
        watch,
    };
    use rmcp::ServiceExt;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("cannot start the MCP session: {e}"))?;
    if watch {
        let peer = running.peer().clone();
        tokio::spawn(watch_dir(loader, dir, served, present, tools, peer));
    }
    running
        .waiting()
        .await
        .map_err(|e| format!("the MCP session failed: {e}"))?;
    Ok(())
}

async fn watch_dir(
    loader: super::Loader,
    dir: PathBuf,
    mut served: Served,
    mut present: BTreeMap<PathBuf, Fingerprint>,
    tools: Arc<RwLock<ToolServerHandle>>,
    peer: Peer<RoleServer>,
) {
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
                tracing::warn!("{error}");
                continue;
            }
            Err(_) => continue,
        };
        present = now;
        if !served.update(loaded, &present) {
            continue;
        }
        *tools.write().unwrap_or_else(|p| p.into_inner()) = served.tools();
        let notification =
            ServerNotification::ToolListChangedNotification(ToolListChangedNotification::default());
        if peer.send_notification(notification).await.is_err() {
            return;
        }
    }
}
