//! The component side of a plugin: the exports of the world `llm-worker:tool/tool-plugin`
//! (1.0.0), served by the tools, resources and prompts of one `#[tool_registry]` value.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
#[cfg(not(target_arch = "wasm32"))]
use std::task::{Context, Waker};

use crate::content::ToolOutput;
use crate::tool::{Tool, ToolError, ToolMeta, ToolRegistry};

#[cfg(target_arch = "wasm32")]
pub mod bindings;
#[cfg(target_arch = "wasm32")]
mod host;

#[cfg(target_arch = "wasm32")]
pub use host::install_logger;
#[cfg(target_arch = "wasm32")]
pub(crate) use host::{host_list_changed, host_log, host_progress, host_resource_updated};

/// Runs a future to completion on the calling thread: in a plugin, in a nested event loop of
/// the component model, natively by polling it (the tool API's own futures never wait on
/// anything in a unit test).
///
/// In a plugin of contract 1.0.0 this holds the whole instance: while the future waits, none
/// of the instance's other calls runs (the component model enters an instance for one task
/// at a time, and a task waiting in place keeps it entered). Await instead wherever the code
/// is `async`; `#[tool_registry]` awaits `async` tools, resources and prompts in the exports.
pub fn block_on<F: Future>(future: F) -> F::Output
where
    F::Output: 'static,
{
    #[cfg(target_arch = "wasm32")]
    {
        bindings::wit_bindgen::rt::async_support::block_on(future)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let mut future = pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            std::thread::yield_now();
        }
    }
}

/// One registry value and its tools, created once per instance: the tools hold clones of
/// the value, and the value itself serves the resources, prompts and completions.
pub struct Plugin<R> {
    registry: R,
    tools: Vec<(ToolMeta, Arc<dyn Tool>)>,
}

impl<R: ToolRegistry> Plugin<R> {
    /// Runs every definition's factory of `registry`, and keeps it.
    pub fn new(registry: R) -> Self {
        let tools = registry
            .tool_definitions()
            .iter()
            .map(|definition| definition())
            .collect();
        Self { registry, tools }
    }

    /// The registry value, which serves resources, prompts and completions.
    pub fn registry(&self) -> &R {
        &self.registry
    }

    /// The tools' metadata, in declaration order.
    pub fn metas(&self) -> impl Iterator<Item = &ToolMeta> {
        self.tools.iter().map(|(meta, _)| meta)
    }

    /// Runs the tool `name` on the content path ([`Tool::call`]).
    ///
    /// # Errors
    /// `InvalidArgument` naming the plugin's tools when it has no tool `name`; otherwise the
    /// tool's error.
    pub async fn call(&self, name: &str, input_json: &str) -> Result<ToolOutput, ToolError> {
        let Some((_, tool)) = self.tools.iter().find(|(meta, _)| meta.name == name) else {
            let names: Vec<&str> = self.metas().map(|m| m.name.as_str()).collect();
            return Err(ToolError::InvalidArgument(format!(
                "this plugin has no tool '{name}'; its tools are: {}",
                names.join(", ")
            )));
        };
        tool.call(input_json).await
    }
}

/// Runs `work` until it ends, or until the host cancels the call (`None`): a call of contract
/// 1.0.0 that ran out of time while it awaited is told so, and returns at once (its result
/// would be dropped).
#[cfg(target_arch = "wasm32")]
pub async fn until_cancelled<F: Future>(work: F) -> Option<F::Output> {
    let mut work = pin!(work);
    let mut cancelled = pin!(bindings::llm_worker::tool::host::cancelled());
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        cancelled.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// Makes the `#[tool_registry]` type the component's exports: `tools` lists its tools,
/// `execute` runs one (through [`Tool::call`]), and `resources`, `resource-templates`,
/// `read-resource`, `prompts`, `get-prompt` and `complete` are answered by its
/// [`ToolRegistry`] methods. Use it once per plugin crate, at the crate root.
///
/// `export_plugin!(MyTools)` creates the value with `Default::default()`;
/// `export_plugin!(MyTools = MyTools::new(…))` with the given expression. The value is created
/// once per instance, on the first call; its tools hold clones of it and keep their state
/// between calls, as does the value serving resources and prompts (share state between them
/// through a field such as an `Arc<Mutex<…>>`). Before it is created, the `log` crate's
/// records start going to the host (see [`crate::log`]).
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
            use $crate::__private::bindings as __bindings;

            fn __llm_worker_plugin() -> &'static $crate::__private::Plugin<$registry> {
                static PLUGIN: ::std::sync::OnceLock<$crate::__private::Plugin<$registry>> =
                    ::std::sync::OnceLock::new();
                PLUGIN.get_or_init(|| {
                    // Before the value is created, so that its construction's logs arrive.
                    $crate::__private::install_logger();
                    let registry: $registry = $init;
                    $crate::__private::Plugin::new(registry)
                })
            }

            struct __LlmWorkerExports;

            impl __bindings::Guest for __LlmWorkerExports {
                fn tools() -> ::std::vec::Vec<__bindings::ToolMeta> {
                    __bindings::tool_metas(__llm_worker_plugin())
                }

                async fn execute(
                    name: ::std::string::String,
                    input_json: ::std::string::String,
                ) -> ::core::result::Result<__bindings::ToolOutput, __bindings::ToolError> {
                    __bindings::execute(__llm_worker_plugin(), &name, &input_json).await
                }

                fn resources() -> ::std::vec::Vec<__bindings::ResourceMeta> {
                    __bindings::resources(__llm_worker_plugin())
                }

                fn resource_templates() -> ::std::vec::Vec<__bindings::ResourceTemplate> {
                    __bindings::resource_templates(__llm_worker_plugin())
                }

                async fn read_resource(
                    uri: ::std::string::String,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<__bindings::ResourceContents>,
                    __bindings::RequestError,
                > {
                    __bindings::read_resource(__llm_worker_plugin(), &uri).await
                }

                fn prompts() -> ::std::vec::Vec<__bindings::PromptMeta> {
                    __bindings::prompts(__llm_worker_plugin())
                }

                async fn get_prompt(
                    name: ::std::string::String,
                    arguments: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
                ) -> ::core::result::Result<__bindings::Prompt, __bindings::RequestError> {
                    __bindings::get_prompt(__llm_worker_plugin(), &name, &arguments).await
                }

                async fn complete(
                    reference: __bindings::CompletionRef,
                    argument: ::std::string::String,
                    value: ::std::string::String,
                    _context: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
                ) -> ::core::result::Result<__bindings::Completion, __bindings::RequestError>
                {
                    __bindings::complete(__llm_worker_plugin(), reference, &argument, &value)
                }
            }

            __bindings::__export_tool_plugin!(
                __LlmWorkerExports with_types_in $crate::__private::bindings
            );
        };
    };
}
