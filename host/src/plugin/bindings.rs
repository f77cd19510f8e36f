//! The generated host bindings of every version of the WIT world `llm-worker:tool/tool-plugin`
//! (0.1.0, 0.2.0, 0.3.0). Nothing else in the crate sees generated types: they are converted at
//! this module's edge (here, and for 0.3.0's records in `bindings_v3`) to [`PluginToolMeta`],
//! [`crate::ToolError`] and the content types of `llm_worker_guest::content`, and the versions
//! are called through [`PluginPre`] and [`PluginBindings`].

use wasmtime::Store;
use wasmtime::component::{InstancePre, Linker};

use crate::ToolAnnotations;

/// The world of `wit/0.1.0`.
pub(crate) mod v1 {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "tool-plugin",
        exports: { default: async },
    });
}

/// The world of `wit/0.2.0`.
pub(crate) mod v2 {
    wasmtime::component::bindgen!({
        path: "../wit/0.2.0",
        world: "tool-plugin",
        exports: { default: async },
    });
}

/// The world of `wit/0.3.0`. The questions to the client wait for an answer: they are async.
pub(crate) mod v3 {
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

/// The world of `wit/1.0.0`: the waiting exports and the questions are `async` (the component
/// model's concurrency), so one instance serves several calls at once; the lists stay
/// synchronous.
pub(crate) mod v10 {
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

use super::bindings_v3::RawOutput;
use crate::tool::{
    Completion, CompletionRef, Prompt, PromptMeta, RequestError, ResourceContents, ResourceMeta,
    ResourceTemplate,
};
pub(crate) use v2::llm_worker::tool::host::{Host as PluginHostImports, Level as LogLevel};
pub(crate) use v3::llm_worker::tool::client::Host as PluginClientImports;
pub(crate) use v3::llm_worker::tool::host::Host as PluginHostImportsV3;

/// A request to a plugin other than a tool call (contract 0.3.0's exports).
#[derive(Debug, Clone)]
pub(crate) enum Request {
    Resources,
    ReadResource(String),
    Prompts,
    GetPrompt(String, Vec<(String, String)>),
    Complete {
        reference: CompletionRef,
        argument: String,
        value: String,
        context: Vec<(String, String)>,
    },
}

impl Request {
    /// What the plugin's reports name as the "tool" of this call.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Resources => "resources/list",
            Self::ReadResource(_) => "resources/read",
            Self::Prompts => "prompts/list",
            Self::GetPrompt(..) => "prompts/get",
            Self::Complete { .. } => "completion/complete",
        }
    }
}

/// What a [`Request`] returned.
#[derive(Debug)]
pub(crate) enum Response {
    Resources(Vec<ResourceMeta>),
    Contents(Vec<ResourceContents>),
    Prompts(Vec<PromptMeta>),
    Prompt(Prompt),
    Completion(Completion),
}

/// The versions of the package this host loads (the `bindgen!` paths above name each; the
/// rules crate's tests check that they agree).
pub(crate) use llm_worker_rules::contract::VERSIONS;

/// Whether plugins of contract `version` (one of [`VERSIONS`]) serve several calls at once,
/// which needs an engine with the component model's concurrency.
pub(crate) fn is_concurrent_version(version: &str) -> bool {
    version == VERSIONS[3]
}

/// One tool as a plugin lists it, whatever its contract version.
#[derive(Debug, Clone)]
pub(crate) struct PluginToolMeta {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) input_schema: String,
    pub(crate) title: Option<String>,
    pub(crate) output_schema: Option<String>,
    pub(crate) annotations: ToolAnnotations,
    /// Whether its calls may run as tasks (from contract 1.0.0).
    pub(crate) task_support: crate::TaskSupport,
}

impl From<v1::llm_worker::tool::types::ToolMeta> for PluginToolMeta {
    fn from(meta: v1::llm_worker::tool::types::ToolMeta) -> Self {
        Self {
            name: meta.name,
            description: meta.description,
            input_schema: meta.input_schema,
            title: None,
            output_schema: None,
            annotations: ToolAnnotations::default(),
            task_support: crate::TaskSupport::Forbidden,
        }
    }
}

/// The conversions of the records 0.2.0 and 0.3.0 share (the same WIT, generated twice).
macro_rules! shared_records {
    ($($version:ident),+) => {$(
        impl From<$version::llm_worker::tool::types::ToolMeta> for PluginToolMeta {
            fn from(meta: $version::llm_worker::tool::types::ToolMeta) -> Self {
                let hints = meta.annotations;
                Self {
                    name: meta.name,
                    description: meta.description,
                    input_schema: meta.input_schema,
                    title: meta.title,
                    output_schema: meta.output_schema,
                    annotations: ToolAnnotations {
                        read_only: hints.read_only,
                        destructive: hints.destructive,
                        idempotent: hints.idempotent,
                        open_world: hints.open_world,
                    },
                    task_support: crate::TaskSupport::Forbidden,
                }
            }
        }
    )+};
}

shared_records!(v2, v3);

impl From<v10::llm_worker::tool::types::ToolMeta> for PluginToolMeta {
    fn from(meta: v10::llm_worker::tool::types::ToolMeta) -> Self {
        let hints = meta.annotations;
        Self {
            name: meta.name,
            description: meta.description,
            input_schema: meta.input_schema,
            title: meta.title,
            output_schema: meta.output_schema,
            annotations: ToolAnnotations {
                read_only: hints.read_only,
                destructive: hints.destructive,
                idempotent: hints.idempotent,
                open_world: hints.open_world,
            },
            task_support: {
                use v10::llm_worker::tool::types::TaskSupport as Wit;
                match meta.task_support {
                    Wit::Forbidden => crate::TaskSupport::Forbidden,
                    Wit::Optional => crate::TaskSupport::Optional,
                    Wit::Required => crate::TaskSupport::Required,
                }
            },
        }
    }
}

/// The conversion of `tool-error`, the same in every version.
macro_rules! tool_error {
    ($($version:ident),+) => {$(
        impl From<$version::llm_worker::tool::types::ToolError> for crate::ToolError {
            fn from(error: $version::llm_worker::tool::types::ToolError) -> Self {
                use $version::llm_worker::tool::types::ToolError as E;
                match error {
                    E::InvalidArgument(text) => Self::InvalidArgument(text),
                    E::ExecutionFailed(text) => Self::ExecutionFailed(text),
                    E::Internal(text) => Self::Internal(text),
                }
            }
        }
    )+};
}

tool_error!(v1, v2, v3, v10);

/// A component checked against one version of the world, ready to instantiate.
pub(crate) enum PluginPre<T: 'static> {
    V1(v1::ToolPluginPre<T>),
    V2(v2::ToolPluginPre<T>),
    V3(v3::ToolPluginPre<T>),
    V10(v10::ToolPluginPre<T>),
}

impl<T: 'static> Clone for PluginPre<T> {
    fn clone(&self) -> Self {
        match self {
            Self::V1(pre) => Self::V1(pre.clone()),
            Self::V2(pre) => Self::V2(pre.clone()),
            Self::V3(pre) => Self::V3(pre.clone()),
            Self::V10(pre) => Self::V10(pre.clone()),
        }
    }
}

impl<T: Send + 'static> PluginPre<T> {
    /// Checks `pre`'s exports against the world of `version` (one of [`VERSIONS`]).
    pub(crate) fn new(version: &str, pre: InstancePre<T>) -> wasmtime::Result<Self> {
        if version == VERSIONS[0] {
            v1::ToolPluginPre::new(pre).map(Self::V1)
        } else if version == VERSIONS[1] {
            v2::ToolPluginPre::new(pre).map(Self::V2)
        } else if version == VERSIONS[2] {
            v3::ToolPluginPre::new(pre).map(Self::V3)
        } else {
            v10::ToolPluginPre::new(pre).map(Self::V10)
        }
    }

    /// The contract version.
    pub(crate) fn version(&self) -> &'static str {
        match self {
            Self::V1(_) => VERSIONS[0],
            Self::V2(_) => VERSIONS[1],
            Self::V3(_) => VERSIONS[2],
            Self::V10(_) => VERSIONS[3],
        }
    }

    /// Whether its instances serve several calls at once (contract 1.0.0).
    pub(crate) fn is_concurrent(&self) -> bool {
        is_concurrent_version(self.version())
    }

    pub(crate) fn engine(&self) -> &wasmtime::Engine {
        match self {
            Self::V1(pre) => pre.engine(),
            Self::V2(pre) => pre.engine(),
            Self::V3(pre) => pre.engine(),
            Self::V10(pre) => pre.engine(),
        }
    }

    pub(crate) async fn instantiate_async(
        &self,
        store: &mut Store<T>,
    ) -> wasmtime::Result<PluginBindings> {
        Ok(match self {
            Self::V1(pre) => PluginBindings::V1(pre.instantiate_async(store).await?),
            Self::V2(pre) => PluginBindings::V2(pre.instantiate_async(store).await?),
            Self::V3(pre) => PluginBindings::V3(pre.instantiate_async(store).await?),
            Self::V10(pre) => PluginBindings::V10(pre.instantiate_async(store).await?),
        })
    }
}

/// Adds the host interfaces of 0.2.0 and 0.3.0 to `linker` (a 0.1.0 component imports
/// neither): they are versioned names of their own, so both live in one linker.
pub(crate) fn add_host_imports(
    linker: &mut Linker<super::instance::PluginState>,
    concurrent: bool,
) -> wasmtime::Result<()> {
    type T = super::instance::PluginState;
    use wasmtime::component::HasSelf;
    v2::llm_worker::tool::host::add_to_linker::<T, HasSelf<T>>(linker, |state| state)?;
    v3::llm_worker::tool::host::add_to_linker::<T, HasSelf<T>>(linker, |state| state)?;
    v3::llm_worker::tool::client::add_to_linker::<T, HasSelf<T>>(linker, |state| state)?;
    if !concurrent {
        return Ok(());
    }
    v10::llm_worker::tool::host::add_to_linker::<_, super::instance::Concurrent>(
        linker,
        |state| state,
    )?;
    v10::llm_worker::tool::types::add_to_linker::<_, super::instance::Concurrent>(
        linker,
        |state| state,
    )?;
    v10::llm_worker::tool::client::add_to_linker::<_, super::instance::Concurrent>(
        linker,
        |state| state,
    )
}

/// A live instance's exports.
pub(crate) enum PluginBindings {
    V1(v1::ToolPlugin),
    V2(v2::ToolPlugin),
    V3(v3::ToolPlugin),
    V10(v10::ToolPlugin),
}

impl PluginBindings {
    pub(crate) async fn call_tools<T: Send>(
        &self,
        store: &mut Store<T>,
    ) -> wasmtime::Result<Vec<PluginToolMeta>> {
        Ok(match self {
            Self::V1(b) => b
                .call_tools(store)
                .await?
                .into_iter()
                .map(Into::into)
                .collect(),
            Self::V2(b) => b
                .call_tools(store)
                .await?
                .into_iter()
                .map(Into::into)
                .collect(),
            Self::V3(b) => b
                .call_tools(store)
                .await?
                .into_iter()
                .map(Into::into)
                .collect(),
            Self::V10(b) => b
                .call_tools(store)
                .await?
                .into_iter()
                .map(Into::into)
                .collect(),
        })
    }

    /// Runs a request other than a tool call. A plugin of an older contract has no
    /// resources, templates or prompts, and finds nothing.
    pub(crate) async fn call_request<T: Send>(
        &self,
        store: &mut Store<T>,
        request: &Request,
    ) -> wasmtime::Result<Result<Response, RequestError>> {
        if let Self::V10(b) = self {
            return Ok(match request {
                Request::Resources => Ok(Response::Resources(
                    b.call_resources(store)
                        .await?
                        .into_iter()
                        .map(Into::into)
                        .collect(),
                )),
                Request::Prompts => Ok(Response::Prompts(
                    b.call_prompts(store)
                        .await?
                        .into_iter()
                        .map(Into::into)
                        .collect(),
                )),
                _ => Err(RequestError::Internal(
                    "a request of contract 1.0.0 was run outside the instance's event loop".into(),
                )),
            });
        }
        let Self::V3(b) = self else {
            return Ok(match request {
                Request::Resources => Ok(Response::Resources(Vec::new())),
                Request::Prompts => Ok(Response::Prompts(Vec::new())),
                Request::ReadResource(uri) => Err(RequestError::NotFound(format!(
                    "no resource '{uri}' (the plugin, of contract {}, has no resources)",
                    self.version()
                ))),
                Request::GetPrompt(name, _) => Err(RequestError::NotFound(format!(
                    "no prompt '{name}' (the plugin, of contract {}, has no prompts)",
                    self.version()
                ))),
                Request::Complete { .. } => Ok(Response::Completion(Completion::default())),
            });
        };
        Ok(match request {
            Request::Resources => Ok(Response::Resources(
                b.call_resources(store)
                    .await?
                    .into_iter()
                    .map(Into::into)
                    .collect(),
            )),
            Request::Prompts => Ok(Response::Prompts(
                b.call_prompts(store)
                    .await?
                    .into_iter()
                    .map(Into::into)
                    .collect(),
            )),
            Request::ReadResource(uri) => b
                .call_read_resource(store, uri)
                .await?
                .map(|contents| Response::Contents(contents.into_iter().map(Into::into).collect()))
                .map_err(Into::into),
            Request::GetPrompt(name, arguments) => b
                .call_get_prompt(store, name, arguments)
                .await?
                .map(|prompt| Response::Prompt(prompt.into()))
                .map_err(Into::into),
            Request::Complete {
                reference,
                argument,
                value,
                context,
            } => b
                .call_complete(store, &reference.clone().into(), argument, value, context)
                .await?
                .map(|completion| Response::Completion(completion.into()))
                .map_err(Into::into),
        })
    }

    fn version(&self) -> &'static str {
        match self {
            Self::V1(_) => VERSIONS[0],
            Self::V2(_) => VERSIONS[1],
            Self::V3(_) => VERSIONS[2],
            Self::V10(_) => VERSIONS[3],
        }
    }

    /// The resource templates (read once, at load). An older plugin has none.
    pub(crate) async fn call_resource_templates<T: Send>(
        &self,
        store: &mut Store<T>,
    ) -> wasmtime::Result<Vec<ResourceTemplate>> {
        Ok(match self {
            Self::V3(b) => b
                .call_resource_templates(store)
                .await?
                .into_iter()
                .map(Into::into)
                .collect(),
            Self::V10(b) => b
                .call_resource_templates(store)
                .await?
                .into_iter()
                .map(Into::into)
                .collect(),
            _ => Vec::new(),
        })
    }

    pub(crate) async fn call_execute<T: Send>(
        &self,
        store: &mut Store<T>,
        name: &str,
        input_json: &str,
    ) -> wasmtime::Result<Result<RawOutput, crate::ToolError>> {
        Ok(match self {
            Self::V1(b) => b
                .call_execute(store, name, input_json)
                .await?
                .map(RawOutput::legacy)
                .map_err(Into::into),
            Self::V2(b) => b
                .call_execute(store, name, input_json)
                .await?
                .map(RawOutput::legacy)
                .map_err(Into::into),
            Self::V3(b) => b
                .call_execute(store, name, input_json)
                .await?
                .map(Into::into)
                .map_err(Into::into),
            Self::V10(_) => Err(crate::ToolError::Internal(
                "a call of contract 1.0.0 was run outside the instance's event loop".into(),
            )),
        })
    }
}
