//! The component side of a plugin: the `tools` and `execute` exports of the world
//! `llm-worker:tool/tool-plugin`, served by the tools of one `#[tool_registry]` type.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::tool::{Tool, ToolError, ToolMeta, ToolRegistry};

/// The generated guest bindings of the world `tool-plugin`. Only [`export_plugin!`] uses them.
#[cfg(target_arch = "wasm32")]
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit/0.2.0",
        world: "tool-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_tool_plugin",
        default_bindings_module: "::llm_worker_guest::__private::bindings",
        runtime_path: "::llm_worker_guest::__private::bindings::wit_bindgen::rt",
    });
    #[doc(hidden)]
    pub use wit_bindgen;

    use self::llm_worker::tool::types::Annotations;
    use crate::export::Plugin;

    impl From<crate::ToolError> for ToolError {
        fn from(error: crate::ToolError) -> Self {
            match error {
                crate::ToolError::InvalidArgument(text) => Self::InvalidArgument(text),
                crate::ToolError::ExecutionFailed(text) => Self::ExecutionFailed(text),
                crate::ToolError::Internal(text) => Self::Internal(text),
            }
        }
    }

    /// Converts the plugin's tool list to the WIT records.
    pub fn tool_metas(plugin: &Plugin) -> Vec<ToolMeta> {
        plugin
            .metas()
            .map(|meta| ToolMeta {
                name: meta.name.clone(),
                description: meta.description.clone(),
                input_schema: meta.input_schema.to_string(),
                title: meta.title.clone(),
                output_schema: meta.output_schema.as_ref().map(ToString::to_string),
                annotations: Annotations {
                    read_only: meta.annotations.read_only,
                    destructive: meta.annotations.destructive,
                    idempotent: meta.annotations.idempotent,
                    open_world: meta.annotations.open_world,
                },
            })
            .collect()
    }
}

/// Sends a log message to the host.
#[cfg(target_arch = "wasm32")]
pub(crate) fn host_log(level: crate::log::Level, message: &str) {
    use bindings::llm_worker::tool::host::{Level, log};
    let level = match level {
        crate::log::Level::Trace => Level::Trace,
        crate::log::Level::Debug => Level::Debug,
        crate::log::Level::Info => Level::Info,
        crate::log::Level::Warn => Level::Warn,
        crate::log::Level::Error => Level::Error,
    };
    log(level, message);
}

/// The `log` crate's logger in a plugin: its records (a plugin's dependencies log through
/// it) go to the host like the SDK's own `log::info!`.
#[cfg(target_arch = "wasm32")]
struct HostLogger;

#[cfg(target_arch = "wasm32")]
impl ::log::Log for HostLogger {
    fn enabled(&self, _: &::log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &::log::Record<'_>) {
        use crate::log::Level;
        let level = match record.level() {
            ::log::Level::Error => Level::Error,
            ::log::Level::Warn => Level::Warn,
            ::log::Level::Info => Level::Info,
            ::log::Level::Debug => Level::Debug,
            ::log::Level::Trace => Level::Trace,
        };
        match record.args().as_str() {
            Some(text) => crate::report::log(level, text),
            None => crate::report::log(level, &record.args().to_string()),
        }
    }

    fn flush(&self) {}
}

/// Makes [`HostLogger`] the `log` crate's logger, at every level (the host filters). Called by
/// [`export_plugin!`]'s glue before the plugin's value is created; once installed, later calls
/// do nothing, and a logger the plugin installed itself is kept.
#[cfg(target_arch = "wasm32")]
pub fn install_logger() {
    static LOGGER: HostLogger = HostLogger;
    if ::log::set_logger(&LOGGER).is_ok() {
        ::log::set_max_level(::log::LevelFilter::Trace);
    }
}

/// Sends a progress report to the host.
#[cfg(target_arch = "wasm32")]
pub(crate) fn host_progress(done: f64, total: Option<f64>, message: Option<&str>) {
    bindings::llm_worker::tool::host::progress(done, total, message);
}

/// Runs a future to completion on the calling thread. A guest has no event loop: a tool's
/// `async fn` runs until it returns.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}

/// The tools of one registry type, created once per instance.
pub struct Plugin {
    tools: Vec<(ToolMeta, Arc<dyn Tool>)>,
}

impl Plugin {
    /// Runs every definition's factory of `registry`.
    pub fn new(registry: &impl ToolRegistry) -> Self {
        Self {
            tools: registry
                .tool_definitions()
                .iter()
                .map(|definition| definition())
                .collect(),
        }
    }

    /// The tools' metadata, in declaration order.
    pub fn metas(&self) -> impl Iterator<Item = &ToolMeta> {
        self.tools.iter().map(|(meta, _)| meta)
    }

    /// Runs the tool `name`.
    pub fn execute(&self, name: &str, input_json: &str) -> Result<String, ToolError> {
        let Some((_, tool)) = self.tools.iter().find(|(meta, _)| meta.name == name) else {
            let names: Vec<&str> = self.metas().map(|m| m.name.as_str()).collect();
            return Err(ToolError::InvalidArgument(format!(
                "this plugin has no tool '{name}'; its tools are: {}",
                names.join(", ")
            )));
        };
        block_on(tool.execute(input_json))
    }
}

/// Makes the `#[tool_registry]` type the component's exports: `tools` lists its tools and
/// `execute` runs one. Use it once per plugin crate, at the crate root.
///
/// `export_plugin!(MyTools)` creates the value with `Default::default()`;
/// `export_plugin!(MyTools = MyTools::new(…))` with the given expression. The value is created
/// once per instance, on the first call, and its tools keep their state between calls. Before
/// it is created, the `log` crate's records start going to the host (see [`crate::log`]).
///
/// On targets other than WebAssembly this expands to nothing, so the crate's tools can be
/// unit-tested natively with `cargo test`.
#[macro_export]
macro_rules! export_plugin {
    ($registry:ty) => {
        $crate::export_plugin!($registry = <$registry as ::core::default::Default>::default());
    };
    ($registry:ty = $init:expr) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            fn __llm_worker_plugin() -> &'static $crate::__private::Plugin {
                static PLUGIN: ::std::sync::OnceLock<$crate::__private::Plugin> =
                    ::std::sync::OnceLock::new();
                PLUGIN.get_or_init(|| {
                    // Before the value is created, so that its construction's logs arrive.
                    $crate::__private::install_logger();
                    let registry: $registry = $init;
                    $crate::__private::Plugin::new(&registry)
                })
            }

            struct __LlmWorkerExports;

            impl $crate::__private::bindings::Guest for __LlmWorkerExports {
                fn tools() -> ::std::vec::Vec<$crate::__private::bindings::ToolMeta> {
                    $crate::__private::bindings::tool_metas(__llm_worker_plugin())
                }

                fn execute(
                    name: ::std::string::String,
                    input_json: ::std::string::String,
                ) -> ::core::result::Result<
                    ::std::string::String,
                    $crate::__private::bindings::ToolError,
                > {
                    __llm_worker_plugin()
                        .execute(&name, &input_json)
                        .map_err(::core::convert::Into::into)
                }
            }

            $crate::__private::bindings::__export_tool_plugin!(
                __LlmWorkerExports with_types_in $crate::__private::bindings
            );
        };
    };
}
