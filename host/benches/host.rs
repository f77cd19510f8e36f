//! `cargo bench -p llm-worker`: what hosting a tool in a sandbox costs, as medians and ratios
//! measured in one run (machines are shared and noisy: compare the ratios, not the times).
// The server's futures (wasmtime's concurrent calls inside rmcp's handlers) nest deeper
// than the default limit of 128 lets the compiler lay them out.
#![recursion_limit = "256"]

#[path = "common/smaps.rs"]
mod smaps;

use std::hint::black_box;
use std::time::{Duration, Instant};

use base64::Engine as _;
use llm_worker::{Limits, PluginHost, ToolServerHandle, Worker};
use llm_worker_guest::{tool, tool_registry};
use llm_worker_tests::bench::{median, ratio, show};
use llm_worker_tests::http_server::TestServer;
use llm_worker_tests::{plugin_path, plugin_v03_path, scratch_dir};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The echo plugin's logic, as a native tool.
#[derive(Clone)]
struct NativeEcho;

#[tool_registry]
impl NativeEcho {
    /// Returns `text` unchanged.
    #[tool]
    fn echo(&self, #[description = "Any text"] text: String) -> Result<String, String> {
        Ok(text)
    }
}

/// The plugin world as bare wasmtime sees it, called the way our host calls it (async, on a
/// fiber, so that a call can yield and be timed out).
mod bare {
    wasmtime::component::bindgen!({
        path: "../wit/0.3.0",
        world: "tool-plugin",
        imports: {
            "llm-worker:tool/client.elicit": async,
            "llm-worker:tool/client.sample": async,
            "llm-worker:tool/client.roots": async,
        },
        exports: { default: async },
    });
}

/// The same world called synchronously: wasmtime's cheapest call, the floor of any host.
mod bare_sync {
    wasmtime::component::bindgen!({
        path: "../wit/0.3.0",
        world: "tool-plugin",
    });
}

/// Contract 1.0.0 as bare wasmtime runs it: calls are tasks of the component model, inside
/// `Store::run_concurrent`.
mod bare_concurrent {
    wasmtime::component::bindgen!({
        path: "../wit/1.0.0",
        world: "tool-plugin",
        imports: {
            "llm-worker:tool/client.elicit": async | store,
            "llm-worker:tool/client.sample": async | store,
            "llm-worker:tool/client.roots": async | store,
            "llm-worker:tool/host.cancelled": async | store,
        },
        exports: {
            "execute": async | store,
            "read-resource": async | store,
            "get-prompt": async | store,
            "complete": async | store,
            default: async,
        },
    });
}

/// The host interfaces of contract 1.0.0 for bare wasmtime, doing nothing (no call is ever
/// cancelled).
struct Bare10;

impl wasmtime::component::HasData for Bare10 {
    type Data<'a> = &'a mut BareState;
}

impl bare_concurrent::llm_worker::tool::host::Host for BareState {
    fn log(&mut self, _: bare_concurrent::llm_worker::tool::host::Level, _: String) {}
    fn progress(&mut self, _: f64, _: Option<f64>, _: Option<String>) {}
    fn resource_updated(&mut self, _: String) {}
    fn list_changed(&mut self, _: bare_concurrent::llm_worker::tool::host::Listing) {}
    fn start_task(&mut self) {}
}

impl bare_concurrent::llm_worker::tool::host::HostWithStore<BareState> for Bare10 {
    async fn cancelled(_: &wasmtime::component::Accessor<BareState, Self>) {
        std::future::pending::<()>().await;
    }
}

impl bare_concurrent::llm_worker::tool::types::Host for BareState {}
impl bare_concurrent::llm_worker::tool::client::Host for BareState {}

impl bare_concurrent::llm_worker::tool::client::HostWithStore<BareState> for Bare10 {
    async fn elicit(
        _: &wasmtime::component::Accessor<BareState, Self>,
        _: String,
        _: String,
        _: String,
    ) -> Result<
        bare_concurrent::llm_worker::tool::client::ElicitationAnswer,
        bare_concurrent::llm_worker::tool::client::QuestionError,
    > {
        Err(bare_concurrent::llm_worker::tool::client::QuestionError::Unsupported(String::new()))
    }

    async fn sample(
        _: &wasmtime::component::Accessor<BareState, Self>,
        _: String,
        _: bare_concurrent::llm_worker::tool::client::SamplingRequest,
    ) -> Result<
        bare_concurrent::llm_worker::tool::client::SamplingAnswer,
        bare_concurrent::llm_worker::tool::client::QuestionError,
    > {
        Err(bare_concurrent::llm_worker::tool::client::QuestionError::Unsupported(String::new()))
    }

    async fn roots(
        _: &wasmtime::component::Accessor<BareState, Self>,
        _: String,
    ) -> Result<
        Vec<bare_concurrent::llm_worker::tool::client::Root>,
        bare_concurrent::llm_worker::tool::client::QuestionError,
    > {
        Err(bare_concurrent::llm_worker::tool::client::QuestionError::Unsupported(String::new()))
    }
}

/// Warm calls of the 1.0.0 echo's `execute` on one bare wasmtime instance (epochs on, as the
/// host has them): each call in a `run_concurrent` of its own (`per_call`), or all of a sample
/// in one.
fn bare_concurrent_calls(input: &str, iterations: u32, per_call: bool) -> Duration {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.concurrency_support(true);
    let engine = Engine::new(&config).expect("engine");
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
    wasmtime_wasi::p3::clocks::add_to_linker(&mut linker).expect("clocks");
    wasmtime_wasi::p3::random::add_to_linker(&mut linker).expect("random");
    bare_concurrent::llm_worker::tool::host::add_to_linker::<_, Bare10>(&mut linker, |state| state)
        .expect("host");
    bare_concurrent::llm_worker::tool::types::add_to_linker::<_, Bare10>(&mut linker, |state| {
        state
    })
    .expect("types");
    bare_concurrent::llm_worker::tool::client::add_to_linker::<_, Bare10>(&mut linker, |state| {
        state
    })
    .expect("client");
    let component =
        wasmtime::component::Component::from_file(&engine, plugin_path("echo")).expect("compile");
    let pre =
        bare_concurrent::ToolPluginPre::new(linker.instantiate_pre(&component).expect("link"))
            .expect("world");
    let mut store = bare_store(&engine);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let plugin = runtime.block_on(async {
        pre.instantiate_async(&mut store)
            .await
            .expect("instantiate")
    });
    median(iterations, |n| {
        runtime.block_on(async {
            if per_call {
                for _ in 0..n {
                    let plugin = &plugin;
                    black_box(
                        store
                            .run_concurrent(async |accessor| {
                                plugin
                                    .call_execute(accessor, "echo".into(), input.into())
                                    .await
                            })
                            .await
                            .expect("run")
                            .expect("call")
                            .ok(),
                    );
                }
            } else {
                let plugin = &plugin;
                store
                    .run_concurrent(async |accessor| {
                        for _ in 0..n {
                            black_box(
                                plugin
                                    .call_execute(accessor, "echo".into(), input.into())
                                    .await
                                    .expect("call")
                                    .ok(),
                            );
                        }
                    })
                    .await
                    .expect("run");
            }
        })
    })
}

struct BareState {
    wasi: WasiCtx,
    table: ResourceTable,
}

/// The host interfaces of contract 0.3.0, doing nothing (the echo tool neither logs, reports
/// nor asks).
impl bare::llm_worker::tool::host::Host for BareState {
    fn log(&mut self, _: bare::llm_worker::tool::host::Level, _: String) {}
    fn progress(&mut self, _: f64, _: Option<f64>, _: Option<String>) {}
    fn resource_updated(&mut self, _: String) {}
    fn list_changed(&mut self, _: bare::llm_worker::tool::host::Listing) {}
}

impl bare::llm_worker::tool::client::Host for BareState {
    async fn elicit(
        &mut self,
        _: String,
        _: String,
        _: String,
    ) -> Result<
        bare::llm_worker::tool::client::ElicitationAnswer,
        bare::llm_worker::tool::client::QuestionError,
    > {
        Err(bare::llm_worker::tool::client::QuestionError::Unsupported(
            String::new(),
        ))
    }

    async fn sample(
        &mut self,
        _: String,
        _: bare::llm_worker::tool::client::SamplingRequest,
    ) -> Result<
        bare::llm_worker::tool::client::SamplingAnswer,
        bare::llm_worker::tool::client::QuestionError,
    > {
        Err(bare::llm_worker::tool::client::QuestionError::Unsupported(
            String::new(),
        ))
    }

    async fn roots(
        &mut self,
        _: String,
    ) -> Result<
        Vec<bare::llm_worker::tool::client::Root>,
        bare::llm_worker::tool::client::QuestionError,
    > {
        Err(bare::llm_worker::tool::client::QuestionError::Unsupported(
            String::new(),
        ))
    }
}

impl bare_sync::llm_worker::tool::host::Host for BareState {
    fn log(&mut self, _: bare_sync::llm_worker::tool::host::Level, _: String) {}
    fn progress(&mut self, _: f64, _: Option<f64>, _: Option<String>) {}
    fn resource_updated(&mut self, _: String) {}
    fn list_changed(&mut self, _: bare_sync::llm_worker::tool::host::Listing) {}
}

impl bare_sync::llm_worker::tool::client::Host for BareState {
    fn elicit(
        &mut self,
        _: String,
        _: String,
        _: String,
    ) -> Result<
        bare_sync::llm_worker::tool::client::ElicitationAnswer,
        bare_sync::llm_worker::tool::client::QuestionError,
    > {
        Err(bare_sync::llm_worker::tool::client::QuestionError::Unsupported(String::new()))
    }

    fn sample(
        &mut self,
        _: String,
        _: bare_sync::llm_worker::tool::client::SamplingRequest,
    ) -> Result<
        bare_sync::llm_worker::tool::client::SamplingAnswer,
        bare_sync::llm_worker::tool::client::QuestionError,
    > {
        Err(bare_sync::llm_worker::tool::client::QuestionError::Unsupported(String::new()))
    }

    fn roots(
        &mut self,
        _: String,
    ) -> Result<
        Vec<bare_sync::llm_worker::tool::client::Root>,
        bare_sync::llm_worker::tool::client::QuestionError,
    > {
        Err(bare_sync::llm_worker::tool::client::QuestionError::Unsupported(String::new()))
    }
}

impl WasiView for BareState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Median time per iteration over 21 samples of `iterations` each, after a warm-up.
fn calls(
    runtime: &tokio::runtime::Runtime,
    tools: &ToolServerHandle,
    input: &str,
    iterations: u32,
) -> Duration {
    median(iterations, |n| {
        runtime.block_on(async {
            for _ in 0..n {
                black_box(tools.call_tool("echo", input).await.expect("echo"));
            }
        })
    })
}

/// For a profiler, run only when named (`-- profile`): 2,000 warm echo calls through
/// `call_tool`, 2,000 on bare wasmtime with the host's engine settings, and 2,000 of the echo
/// of contract 1.0.0 through `call_tool`, each loop in a function of its own (for
/// `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=host::profiled_calls
/// --toggle-collect=host::profiled_bare_calls --toggle-collect=host::profiled_v10_calls` on the
/// bench's executable); and the size of the future `Tool::execute` boxes on every call.
fn profile(runtime: &tokio::runtime::Runtime, host: &PluginHost, echo: &llm_worker::LoadedPlugin) {
    const CALLS: u32 = 2_000;
    let wasm = registered(echo).tool_server_handle();
    let _context = runtime.enter();
    let input = format!(r#"{{"text":"{}"}}"#, "x".repeat(82));
    let (_, tool) = wasm.get_tool("echo").expect("echo tool");
    let future = std::mem::size_of_val(&*tool.execute(&input));
    // Warm: the instance started and the plugin initialised before the measured loop.
    echo_calls(runtime, &wasm, &input, 200);
    let started = Instant::now();
    profiled_calls(runtime, &wasm, &input, CALLS);
    let ours = started.elapsed() / CALLS;
    let (engine, pre) = bare_async_pre(host_serial_engine);
    let mut store = bare_store(&engine);
    let plugin = futures::executor::block_on(async {
        let plugin = pre
            .instantiate_async(&mut store)
            .await
            .expect("instantiate");
        plugin.call_tools(&mut store).await.expect("tools");
        plugin
    });
    bare_echo_calls(&plugin, &mut store, &input, 200);
    let started = Instant::now();
    profiled_bare_calls(&plugin, &mut store, &input, CALLS);
    let bare = started.elapsed() / CALLS;
    let v10 = registered(&host.load(plugin_path("echo")).expect("load echo (1.0.0)"))
        .tool_server_handle();
    echo_calls(runtime, &v10, &input, 200);
    let started = Instant::now();
    profiled_v10_calls(runtime, &v10, &input, CALLS);
    let concurrent = started.elapsed() / CALLS;
    println!("\n| 2,000 warm echo calls, for a profiler | per call |");
    println!("|---|---|");
    println!("| `call_tool` (`host::profiled_calls`) | {} |", show(ours));
    println!(
        "| bare wasmtime, the host's 0.x engine (`host::profiled_bare_calls`) | {} |",
        show(bare)
    );
    println!(
        "| contract 1.0.0 through `call_tool` (`host::profiled_v10_calls`) | {} |",
        show(concurrent)
    );
    println!("| size of the future `Tool::execute` boxes | {future} B |");
}

/// `n` echo calls through `call_tool` (the warm-ups).
fn echo_calls(runtime: &tokio::runtime::Runtime, tools: &ToolServerHandle, input: &str, n: u32) {
    runtime.block_on(async {
        for _ in 0..n {
            black_box(tools.call_tool("echo", input).await.expect("echo"));
        }
    });
}

#[inline(never)]
fn profiled_calls(
    runtime: &tokio::runtime::Runtime,
    tools: &ToolServerHandle,
    input: &str,
    n: u32,
) {
    runtime.block_on(async {
        for _ in 0..n {
            black_box(tools.call_tool("echo", input).await.expect("echo"));
        }
    });
}

/// The same loop as [`profiled_calls`], written out: a shared function (or one the compiler
/// would find identical and merge) would put both under one name, or switch a profiler's
/// toggle off when one enters the other.
#[inline(never)]
fn profiled_v10_calls(
    runtime: &tokio::runtime::Runtime,
    tools: &ToolServerHandle,
    input: &str,
    n: u32,
) {
    runtime.block_on(async {
        for _ in 0..n {
            black_box(tools.call_tool("echo", input).await.expect("echo (1.0.0)"));
        }
    });
}

#[inline(never)]
fn profiled_bare_calls(
    plugin: &bare::ToolPlugin,
    store: &mut Store<BareState>,
    input: &str,
    n: u32,
) {
    bare_echo_calls(plugin, store, input, n);
}

/// `n` echo calls on bare wasmtime (inlined, as [`echo_calls`]).
#[inline(always)]
fn bare_echo_calls(plugin: &bare::ToolPlugin, store: &mut Store<BareState>, input: &str, n: u32) {
    futures::executor::block_on(async {
        for _ in 0..n {
            black_box(
                plugin
                    .call_execute(&mut *store, "echo", input)
                    .await
                    .expect("call")
                    .ok(),
            );
        }
    });
}

/// A store with an empty WASI context, for bare wasmtime.
fn bare_store(engine: &Engine) -> Store<BareState> {
    let mut store = Store::new(
        engine,
        BareState {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        },
    );
    store.set_epoch_deadline(u64::MAX / 2);
    // Only engines that meter fuel accept it.
    let _ = store.set_fuel(u64::MAX);
    store
}

/// The echo component, compiled by bare wasmtime with `configure` applied to the defaults.
fn bare_component(
    async_wasi: bool,
    configure: impl FnOnce(&mut Config),
) -> (Engine, Linker<BareState>, wasmtime::component::Component) {
    let mut config = Config::new();
    config.wasm_component_model(true);
    configure(&mut config);
    let engine = Engine::new(&config).expect("engine");
    let mut linker = Linker::new(&engine);
    if async_wasi {
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
        bare::llm_worker::tool::host::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state| state,
        )
        .expect("host");
        bare::llm_worker::tool::client::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state| state,
        )
        .expect("client");
    } else {
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).expect("wasi");
        bare_sync::llm_worker::tool::host::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state| state,
        )
        .expect("host");
        bare_sync::llm_worker::tool::client::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state| state,
        )
        .expect("client");
    }
    let component = wasmtime::component::Component::from_file(&engine, plugin_v03_path("echo"))
        .expect("compile");
    (engine, linker, component)
}

/// The settings of the host's engine for plugins of contracts 0.1.0–0.3.0 that bear on a
/// call: epochs on (time limits), the component model's concurrency off.
fn host_serial_engine(config: &mut Config) {
    config.epoch_interruption(true);
    config.concurrency_support(false);
}

/// The echo component ready to instantiate with bare wasmtime's async bindings.
fn bare_async_pre(configure: impl FnOnce(&mut Config)) -> (Engine, bare::ToolPluginPre<BareState>) {
    let (engine, linker, component) = bare_component(true, configure);
    let pre =
        bare::ToolPluginPre::new(linker.instantiate_pre(&component).expect("link")).expect("world");
    (engine, pre)
}

/// Warm calls of `execute` on one bare wasmtime instance, async, with `configure` applied.
fn bare_async_calls_with(
    input: &str,
    iterations: u32,
    configure: impl FnOnce(&mut Config),
) -> Duration {
    let (engine, pre) = bare_async_pre(configure);
    let mut store = bare_store(&engine);
    let plugin = futures::executor::block_on(async {
        let plugin = pre
            .instantiate_async(&mut store)
            .await
            .expect("instantiate");
        plugin.call_tools(&mut store).await.expect("tools");
        plugin
    });
    median(iterations, |n| {
        futures::executor::block_on(async {
            for _ in 0..n {
                black_box(
                    plugin
                        .call_execute(&mut store, "echo", input)
                        .await
                        .expect("call")
                        .ok(),
                );
            }
        })
    })
}

/// Warm calls of `execute` on one bare wasmtime instance, sync (default configuration).
fn bare_sync_calls(input: &str, iterations: u32) -> Duration {
    let (engine, linker, component) = bare_component(false, |_| {});
    let pre = bare_sync::ToolPluginPre::new(linker.instantiate_pre(&component).expect("link"))
        .expect("world");
    let mut store = bare_store(&engine);
    let plugin = pre.instantiate(&mut store).expect("instantiate");
    plugin.call_tools(&mut store).expect("tools");
    median(iterations, |n| {
        for _ in 0..n {
            black_box(
                plugin
                    .call_execute(&mut store, "echo", input)
                    .expect("call")
                    .ok(),
            );
        }
    })
}

/// The sections, in order; `cargo bench -p llm-worker --bench host -- NAME…` runs only those
/// whose name contains one of the arguments (e.g. `-- calls` while profiling the call path).
/// `sessions` needs the `mcp` feature (`cargo bench -p llm-worker --features mcp --bench host
/// -- sessions`); without it, it says so.
const SECTIONS: [&str; 9] = [
    "calls",
    "content",
    "registration",
    "cache",
    "scaling",
    "concurrency",
    "sessions",
    "memory",
    "profile",
];

/// Sections run only when named.
const ON_REQUEST: [&str; 1] = ["profile"];

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let wanted = |section: &str| {
        (filters.is_empty() && !ON_REQUEST.contains(&section))
            || filters
                .iter()
                .any(|filter| section.contains(filter.as_str()))
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let host = PluginHost::with_limits(
        Limits::default()
            .max_input_bytes(1 << 20)
            .max_output_bytes(1 << 20),
    )
    .expect("host");
    // The bare rows bind contract 0.3.0 (one call at a time, as wasmtime's synchronous
    // component model runs it): the echo the host rows call is the same component.
    let echo = host.load(plugin_v03_path("echo")).expect("load echo");

    println!("\nllm-worker benchmarks (medians of 21 samples; ratios from this run)");
    for section in SECTIONS.into_iter().filter(|section| wanted(section)) {
        match section {
            "calls" => warm_calls(&runtime, &echo),
            "content" => content_calls(&runtime, &echo),
            "registration" => registration(&runtime, &echo),
            "cache" => cache(),
            "scaling" => scaling(&echo),
            "concurrency" => concurrency(&runtime, &host, &echo),
            "sessions" => sessions(&runtime),
            "profile" => profile(&runtime, &host, &echo),
            _ => memory_per_instance(&echo),
        }
    }
    println!();
}

/// Contract 0.3.0's content path: a 1 MB image out of the plugin (`Tool::call`), beside a text
/// of the same size through the same path, and base64 (which MCP's JSON requires of bytes)
/// of 1 MB alone.
fn content_calls(runtime: &tokio::runtime::Runtime, echo: &llm_worker::LoadedPlugin) {
    let tools = registered(echo).tool_server_handle();
    let (_, image) = tools.get_tool("image").expect("image tool");
    let (_, text) = tools.get_tool("echo").expect("echo tool");
    let size = 1_000_000;
    let image_input = format!(r#"{{"bytes":{size}}}"#);
    let text_input = format!(r#"{{"text":"{}"}}"#, "x".repeat(size - 20));
    let iterations = 100;
    let call = |tool: &std::sync::Arc<dyn llm_worker::Tool>, input: &str| {
        median(iterations, |n| {
            runtime.block_on(async {
                for _ in 0..n {
                    black_box(tool.call(input).await.expect("call"));
                }
            })
        })
    };
    let i = call(&image, &image_input);
    let t = call(&text, &text_input);
    let bytes = vec![0x5a_u8; size];
    let b = median(iterations, |n| {
        for _ in 0..n {
            black_box(base64::engine::general_purpose::STANDARD.encode(black_box(&bytes)));
        }
    });
    println!("\n| 1 MB out of a plugin, `Tool::call` | median | vs text of 1 MB |");
    println!("|---|---|---|");
    println!(
        "| image 1,000,000 B (`Content::Image`) | {} | {} |",
        show(i),
        ratio(i, t)
    );
    println!(
        "| text ~1,000,000 B (echo, input of the same size) | {} | 1.00x |",
        show(t)
    );
    println!(
        "| base64 of 1,000,000 B alone (MCP's JSON needs it) | {} | {} |",
        show(b),
        ratio(b, t)
    );
}

/// A worker with every tool of `plugin` registered: one new session.
fn registered(plugin: &llm_worker::LoadedPlugin) -> Worker {
    let mut worker = Worker::new();
    worker
        .register_tools(plugin.definitions())
        .expect("register");
    worker
}

/// A worker with the native echo registered.
fn native_echo() -> Worker {
    let mut worker = Worker::new();
    worker
        .register_tool(NativeEcho.echo_definition())
        .expect("register");
    worker
}

/// The echo plugin, loaded by a host with a pool of 1,000 instance slots.
/// Opening an MCP session with the six example plugins and closing it, in process (rmcp's
/// client over an in-memory duplex, so no HTTP or process in the way): on a host that maps each
/// instance's memories and stacks as it starts, and on one with a pool of instance slots.
#[cfg(feature = "mcp")]
fn sessions(runtime: &tokio::runtime::Runtime) {
    use rmcp::ServiceExt;
    const PLUGINS: [&str; 6] = ["greet", "counter", "notes", "calc", "text", "search"];
    let open_and_close = |host: PluginHost, sessions: u32| {
        let plugins: Vec<_> = PLUGINS
            .iter()
            .map(|name| host.load(plugin_path(name)).expect("load"))
            .collect();
        let catalog = llm_worker::mcp::ToolCatalog::from_plugins(plugins.iter());
        let options = llm_worker::mcp::McpOptions::new("bench", "1");
        median(sessions, |n| {
            runtime.block_on(async {
                for _ in 0..n {
                    let server = llm_worker::mcp::McpServer::new(&catalog, options.clone());
                    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
                    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                    let served = tokio::spawn(server.serve(server_end, async {
                        let _ = stopped.await;
                    }));
                    let client = ().serve(client_end).await.expect("initialize");
                    // The instances start in the background as the session is set up for
                    // calls (`initialized`), while the client lists the tools.
                    black_box(client.list_all_tools().await.expect("tools/list"));
                    let _ = client.cancel().await;
                    let _ = stop.send(());
                    let _ = served.await;
                }
            })
        })
    };
    let on_demand = open_and_close(PluginHost::new().expect("host"), 200);
    let pooled = open_and_close(
        PluginHost::builder()
            .instance_pool(64)
            .build()
            .expect("pooled host"),
        200,
    );
    println!(
        "\n| an MCP session with the six example plugins, opened, listed and closed in \
         process | median | vs on demand |"
    );
    println!("|---|---|---|");
    println!(
        "| instances mapped as they start (default) | {} | 1.00× |",
        show(on_demand)
    );
    println!(
        "| a pool of instance slots (`instance_pool`, `serve --pool`) | {} | {} |",
        show(pooled),
        ratio(pooled, on_demand)
    );
}

#[cfg(not(feature = "mcp"))]
fn sessions(_: &tokio::runtime::Runtime) {
    println!(
        "\n(sessions: run with `--features mcp`: cargo bench -p llm-worker --features mcp \
         --bench host -- sessions)"
    );
}

fn pooled_echo() -> llm_worker::LoadedPlugin {
    PluginHost::builder()
        .instance_pool(1000)
        .build()
        .expect("pooled host")
        .load(plugin_v03_path("echo"))
        .expect("load echo")
}

/// A warm call through `ToolServerHandle` vs a native tool and a bare wasmtime call.
fn warm_calls(runtime: &tokio::runtime::Runtime, echo: &llm_worker::LoadedPlugin) {
    let wasm = registered(echo).tool_server_handle();
    let native = native_echo().tool_server_handle();

    // Two floors: bare wasmtime as the host configures the engine of a 0.x plugin (epochs on,
    // the component model's concurrency off), and with wasmtime's defaults (concurrency on, as
    // the host's engine for contract 1.0.0 has it) and epochs.
    println!(
        "\n| warm call | wasm plugin | native Tool | bare async + epochs, host's 0.x engine \
         | bare async + epochs, wasmtime's defaults | bare sync | wasm / native \
         | wasm / bare, host's 0.x engine | wasm / bare, defaults | bare sync / native |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    // WASI's host functions expect a Tokio context.
    let _context = runtime.enter();
    for (label, size, iterations) in [("echo ~100 B", 82, 20_000), ("echo 100 KB", 100_000, 300)] {
        let input = format!(r#"{{"text":"{}"}}"#, "x".repeat(size));
        let w = calls(runtime, &wasm, &input, iterations);
        let n = calls(runtime, &native, &input, iterations);
        let floor = bare_async_calls_with(&input, iterations, host_serial_engine);
        let be = bare_async_calls_with(&input, iterations, |config| {
            config.epoch_interruption(true);
        });
        let bs = bare_sync_calls(&input, iterations);
        println!(
            "| {label} ({} B input) | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            input.len(),
            show(w),
            show(n),
            show(floor),
            show(be),
            show(bs),
            ratio(w, n),
            ratio(w, floor),
            ratio(w, be),
            ratio(bs, n)
        );
    }
    input_check(echo);
    engine_settings();
    idle_calls(runtime, &wasm, &native);
}

/// Calls with the CPU idle for 250 µs before each, as a server's calls between requests: what
/// a call costs when the caches and TLB no longer hold the instance (a warm loop hides it).
fn idle_calls(
    runtime: &tokio::runtime::Runtime,
    wasm: &ToolServerHandle,
    native: &ToolServerHandle,
) {
    let input = format!(r#"{{"text":"{}"}}"#, "x".repeat(82));
    println!("\n| echo ~100 B after 250 µs idle (2,000 calls) | p50 | p90 |");
    println!("|---|---|---|");
    let idle_row = |label: &str, mut times: Vec<Duration>| {
        times.sort_unstable();
        println!(
            "| {label} | {} | {} |",
            show(times[1000]),
            show(times[1800])
        );
    };
    for (label, tools) in [("wasm plugin", wasm), ("native Tool", native)] {
        let mut times = Vec::with_capacity(2000);
        runtime.block_on(async {
            for _ in 0..2000 {
                std::thread::sleep(Duration::from_micros(250));
                let start = Instant::now();
                black_box(tools.call_tool("echo", &input).await.expect("echo"));
                times.push(start.elapsed());
            }
        });
        idle_row(label, times);
    }
    let (engine, pre) = bare_async_pre(host_serial_engine);
    let mut store = bare_store(&engine);
    let mut times = Vec::with_capacity(2000);
    futures::executor::block_on(async {
        let plugin = pre
            .instantiate_async(&mut store)
            .await
            .expect("instantiate");
        plugin.call_tools(&mut store).await.expect("tools");
        for _ in 0..2000 {
            std::thread::sleep(Duration::from_micros(250));
            let start = Instant::now();
            black_box(
                plugin
                    .call_execute(&mut store, "echo", &input)
                    .await
                    .expect("call")
                    .ok(),
            );
            times.push(start.elapsed());
        }
    });
    idle_row(
        "bare async + epochs, host's 0.x engine (same plugin)",
        times,
    );
}

/// A labelled change to wasmtime's default configuration.
type Setting = (&'static str, fn(&mut Config));

/// The engine settings the host uses, measured one by one on a bare async call of the small
/// echo (rather than guessed).
fn engine_settings() {
    let input = format!(r#"{{"text":"{}"}}"#, "x".repeat(82));
    let iterations = 20_000;
    let default = bare_async_calls_with(&input, iterations, |_| {});
    let settings: [Setting; 3] = [
        (
            "`epoch_interruption(true)` (time limits; the host's choice)",
            |config| {
                config.epoch_interruption(true);
            },
        ),
        (
            "`consume_fuel(true)` (the alternative to epochs)",
            |config| {
                config.consume_fuel(true);
            },
        ),
        (
            "`concurrency_support(false)` (off: no contract 1.0.0)",
            |config| {
                config.concurrency_support(false);
            },
        ),
    ];
    println!("\n| engine setting, bare async echo call (~100 B) | median | vs default |");
    println!("|---|---|---|");
    println!("| wasmtime's defaults | {} | 1.00× |", show(default));
    for (label, configure) in settings {
        let time = bare_async_calls_with(&input, iterations, |config| {
            configure(config);
        });
        println!("| {label} | {} | {} |", show(time), ratio(time, default));
    }
}

/// What checking an input on the host costs on its own (size, JSON syntax, schema), the part
/// of a wasm call that a native tool does not do.
fn input_check(echo: &llm_worker::LoadedPlugin) {
    println!("\n| host-side input check (`LoadedPlugin::check_input`) | median |");
    println!("|---|---|");
    for (label, size, iterations) in [("~100 B", 82, 20_000), ("100 KB", 100_000, 300)] {
        let input = format!(r#"{{"text":"{}"}}"#, "x".repeat(size));
        let time = median(iterations, |n| {
            for _ in 0..n {
                black_box(echo.check_input("echo", black_box(&input))).expect("valid");
            }
        });
        println!("| {label} | {} |", show(time));
    }
}

/// A new session: instantiate the plugin and read its tools; with the default (on-demand)
/// allocation, with a pool of instance slots, and in bare wasmtime.
fn registration(runtime: &tokio::runtime::Runtime, echo: &llm_worker::LoadedPlugin) {
    let register = |plugin: &llm_worker::LoadedPlugin| {
        median(200, |n| {
            for _ in 0..n {
                black_box(registered(plugin));
            }
        })
    };
    // Bare wasmtime first, before any pool has reserved its address space.
    let bare = {
        let _context = runtime.enter();
        let (engine, pre) = bare_async_pre(|_| {});
        median(200, |n| {
            futures::executor::block_on(async {
                for _ in 0..n {
                    let mut store = bare_store(&engine);
                    let plugin = pre
                        .instantiate_async(&mut store)
                        .await
                        .expect("instantiate");
                    black_box(plugin.call_tools(&mut store).await.expect("tools"));
                }
            })
        })
    };
    let on_demand = register(echo);
    let pooled = register(&pooled_echo());

    println!("\n| registration (instantiate + read meta), one plugin | median | vs bare |");
    println!("|---|---|---|");
    for (label, time) in [
        ("on-demand allocation (default)", on_demand),
        ("pooled host (`instance_pool(1000)`)", pooled),
        ("bare wasmtime, on-demand", bare),
    ] {
        println!("| {label} | {} | {} |", show(time), ratio(time, bare));
    }
}

/// Loading a plugin: compiling it vs reading the compiled cache.
fn cache() {
    let cache = scratch_dir("bench-cache");
    let cached =
        PluginHost::with_options(Limits::default(), Some(cache.to_path_buf())).expect("host");
    cached.load(plugin_path("greet")).expect("fill the cache");
    let cold = median(3, |n| {
        for _ in 0..n {
            black_box(
                PluginHost::new()
                    .expect("host")
                    .load(plugin_path("greet"))
                    .expect("load"),
            );
        }
    });
    let warm = median(20, |n| {
        for _ in 0..n {
            black_box(cached.load(plugin_path("greet")).expect("load"));
        }
    });
    println!("\n| loading greet.wasm | median | ratio |");
    println!("|---|---|---|");
    println!("| cold compile (+ validate) | {} | |", show(cold));
    println!(
        "| from the compiled cache (+ validate) | {} | {} faster |",
        show(warm),
        ratio(cold, warm)
    );
}

/// Calls on two instances from one thread (one after the other), then from two threads at
/// once (each with its own runtime, so no scheduler decides the placement). The native rows
/// make 20× more calls, so that starting the threads does not dominate them.
fn scaling(echo: &llm_worker::LoadedPlugin) {
    let input = format!(r#"{{"text":"{}"}}"#, "x".repeat(82));
    let session = |plugin: &llm_worker::LoadedPlugin| registered(plugin).tool_server_handle();
    let wasm: Vec<ToolServerHandle> = (0..2).map(|_| session(echo)).collect();
    // The same, but each session from a host (engine) of its own.
    let hosts: Vec<PluginHost> = (0..2).map(|_| PluginHost::new().expect("host")).collect();
    let wasm_two_hosts: Vec<ToolServerHandle> = hosts
        .iter()
        .map(|host| session(&host.load(plugin_v03_path("echo")).expect("load echo")))
        .collect();
    let native: Vec<ToolServerHandle> =
        (0..2).map(|_| native_echo().tool_server_handle()).collect();
    let run = |tools: &[ToolServerHandle], count: usize| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            for i in 0..count {
                let handle = &tools[i % tools.len()];
                black_box(handle.call_tool("echo", &input).await.expect("echo"));
            }
        });
    };
    let one_thread = |sessions: &[ToolServerHandle], calls: usize| {
        let start = Instant::now();
        run(sessions, calls);
        start.elapsed()
    };
    let two_threads = |sessions: &[ToolServerHandle], calls: usize| {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for session in sessions {
                let run = &run;
                scope.spawn(move || run(std::slice::from_ref(session), calls / 2));
            }
        });
        start.elapsed()
    };
    // Medians of 11 runs each: on a shared VM two threads are often not both running.
    let median_of = |measure: &dyn Fn() -> Duration| {
        let mut runs: Vec<Duration> = (0..11).map(|_| measure()).collect();
        runs.sort();
        runs[runs.len() / 2]
    };
    println!("\n| throughput, echo calls on 2 instances | calls | time | scaling |");
    println!("|---|---|---|---|");
    for (label, sessions, calls) in [
        ("native Tool", &native, 400_000),
        ("wasm plugin", &wasm, 20_000),
        (
            "wasm plugin, each instance from its own host",
            &wasm_two_hosts,
            20_000,
        ),
    ] {
        let one = median_of(&|| one_thread(sessions, calls));
        let two = median_of(&|| two_threads(sessions, calls));
        println!("| {label}, 1 thread | {calls} | {} | |", show(one));
        println!(
            "| {label}, 2 threads | {calls} | {} | {} |",
            show(two),
            ratio(one, two)
        );
    }
}

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Resident memory added by 1,000 registered (idle) instances, and by which kind of mapping.
/// Each allocation is measured in a process of its own (this bench, run again with
/// `MEMORY_CHILD`), so that neither reuses what the other freed.
fn memory_per_instance(echo: &llm_worker::LoadedPlugin) {
    if let Ok(which) = std::env::var(MEMORY_CHILD) {
        let plugin = match which.as_str() {
            "pooled" => pooled_echo(),
            _ => echo.clone(),
        };
        let before = (resident_bytes(), smaps::resident_by_mapping("self"));
        let workers: Vec<Worker> = (0..1000).map(|_| registered(&plugin)).collect();
        let after = (resident_bytes(), smaps::resident_by_mapping("self"));
        if let ((Some(before), Some(mapped_before)), (Some(after), Some(mapped_after))) =
            (before, after)
        {
            let per = smaps::added_per(&mapped_before, &mapped_after, 1000.0);
            let per: Vec<String> = per.iter().map(f64::to_string).collect();
            println!(
                "{MEMORY_CHILD} {} {}",
                after.saturating_sub(before) as f64 / 1000.0,
                per.join(" ")
            );
        }
        drop(black_box(workers));
        return;
    }
    let measure = |which: &str| -> Option<Vec<f64>> {
        let output = std::process::Command::new(std::env::current_exe().ok()?)
            .arg("memory")
            .env(MEMORY_CHILD, which)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&output.stdout);
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix(MEMORY_CHILD))?;
        line.split_whitespace().map(|n| n.parse().ok()).collect()
    };
    println!(
        "\n| memory, 1,000 registered idle instances | resident per instance |{}",
        smaps::header()
    );
    println!("|---|---|{}", "---|".repeat(smaps::MAPPINGS.len()));
    for (label, which) in [
        ("on-demand allocation (default)", "on-demand"),
        ("pooled host (`instance_pool(1000)`)", "pooled"),
    ] {
        match measure(which).as_deref() {
            Some([total, per @ ..]) => {
                println!(
                    "| {label} | {:.1} KiB |{}",
                    total / 1024.0,
                    smaps::cells(per)
                );
            }
            _ => println!("| {label} | (not measured: no /proc here, or its process failed) |"),
        }
    }
}

/// Set in the bench's own child processes that measure memory.
const MEMORY_CHILD: &str = "LLM_WORKER_BENCH_MEMORY_CHILD";

/// Contract 1.0.0: what serving calls concurrently costs a call that does not wait (the echo
/// built for 1.0.0 beside the same echo built for 0.3.0), and what it buys calls that wait
/// (calls each awaiting an HTTP response a local server delays by 200 ms, on 1.0.0 and, through
/// `wasi:http@0.2.0`, on 0.3.0); and a CPU-bound call's time limit while its siblings wait.
fn concurrency(
    runtime: &tokio::runtime::Runtime,
    host: &PluginHost,
    echo_v03: &llm_worker::LoadedPlugin,
) {
    let echo_v10 = host.load(plugin_path("echo")).expect("load echo (1.0.0)");
    let input = format!(r#"{{"text":"{}"}}"#, "x".repeat(82));
    let _context = runtime.enter();
    let old = calls(
        runtime,
        &registered(echo_v03).tool_server_handle(),
        &input,
        20_000,
    );
    let new = calls(
        runtime,
        &registered(&echo_v10).tool_server_handle(),
        &input,
        20_000,
    );
    let floor = bare_concurrent_calls(&input, 20_000, false);
    let floor_each = bare_concurrent_calls(&input, 20_000, true);
    println!("\n| warm echo ~100 B, one call at a time | median | vs 0.3.0 | vs bare 1.0.0 |");
    println!("|---|---|---|---|");
    println!(
        "| contract 0.3.0 through `call_tool` | {} | 1.00× | |",
        show(old)
    );
    println!(
        "| contract 1.0.0 through `call_tool` | {} | {} | {} |",
        show(new),
        ratio(new, old),
        ratio(new, floor)
    );
    println!(
        "| bare wasmtime, 1.0.0 echo, calls in one `run_concurrent` | {} | {} | 1.00× |",
        show(floor),
        ratio(floor, old)
    );
    println!(
        "| bare wasmtime, 1.0.0 echo, a `run_concurrent` per call | {} | {} | {} |",
        show(floor_each),
        ratio(floor_each, old),
        ratio(floor_each, floor)
    );

    runtime.block_on(async {
        let server = TestServer::delayed("ok", Duration::from_millis(200));
        let dir = scratch_dir("bench-concurrency");
        let policy = format!(
            "[limits]\ntimeout_ms = 60000\n\n[http]\nallow = [\"http://127.0.0.1:{}\"]\n",
            server.port()
        );
        for (name, path) in [
            ("waiter", plugin_path("waiter")),
            ("fetcher", plugin_v03_path("fetcher")),
        ] {
            std::fs::copy(path, dir.join(format!("{name}.wasm"))).expect("copy");
            std::fs::write(dir.join(format!("{name}.policy.toml")), &policy).expect("policy");
        }
        let url = format!("http://127.0.0.1:{}/", server.port());
        let input = serde_json::json!({ "url": url }).to_string();
        println!(
            "\n| calls of one instance, each awaiting a 200 ms response | 1 call | 8 at once \
             | 8 / 1 |"
        );
        println!("|---|---|---|---|");
        for (label, name) in [
            ("contract 1.0.0 (`waiter`, wasi:http@0.3.0)", "waiter"),
            ("contract 0.3.0 (`fetcher`, wasi:http@0.2.0)", "fetcher"),
        ] {
            let plugin = host.load(dir.join(format!("{name}.wasm"))).expect("load");
            let tools = registered(&plugin).tool_server_handle();
            // The instance is started (and warm) before anything is timed.
            tools.call_tool("fetch", &input).await.expect("fetch");
            let mut ones = Vec::new();
            let mut eights = Vec::new();
            for _ in 0..5 {
                let start = Instant::now();
                tools.call_tool("fetch", &input).await.expect("fetch");
                ones.push(start.elapsed());
                let start = Instant::now();
                let results =
                    futures::future::join_all((0..8).map(|_| tools.call_tool("fetch", &input)))
                        .await;
                eights.push(start.elapsed());
                for result in results {
                    result.expect("fetch");
                }
            }
            ones.sort();
            eights.sort();
            let (one, eight) = (ones[2], eights[2]);
            println!(
                "| {label} | {} | {} | {} |",
                show(one),
                show(eight),
                ratio(eight, one)
            );
        }

        // A CPU-bound call beside seven calls waiting on a server that does not answer.
        let (held, _gate) = TestServer::held("never");
        let limit = Duration::from_millis(500);
        std::fs::write(
            dir.join("waiter.policy.toml"),
            format!(
                "[limits]\ntimeout_ms = {}\n\n[http]\nallow = [\"http://127.0.0.1:{}\"]\n",
                limit.as_millis(),
                held.port()
            ),
        )
        .expect("policy");
        let waiter = host.load(dir.join("waiter.wasm")).expect("load");
        let tools = registered(&waiter).tool_server_handle();
        tools.call_tool("bump", "{}").await.expect("bump");
        let held_input =
            serde_json::json!({ "url": format!("http://127.0.0.1:{}/", held.port()) }).to_string();
        let waiting: Vec<_> = (0..7)
            .map(|_| tools.call_tool("fetch", &held_input))
            .collect();
        let start = Instant::now();
        let (spun, waited) = futures::future::join(
            tools.call_tool("spin", "{}"),
            futures::future::join_all(waiting),
        )
        .await;
        let spin_time = start.elapsed();
        let lost = waited.iter().filter(|result| result.is_err()).count();
        println!(
            "\n| a CPU-bound call, limit {}, beside 7 calls waiting on the network | ended after \
             | outcome |",
            show(limit)
        );
        println!("|---|---|---|");
        println!(
            "| `spin` | {} | {} |",
            show(spin_time),
            match spun {
                Ok(_) => "returned (?)".to_owned(),
                Err(error) => format!("failed: {}", error.to_string().replace('|', "/")),
            }
        );
        println!("| the 7 waiting calls | | {lost} of 7 lost with the instance |");
    });
}
