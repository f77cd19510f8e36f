//! The generated host bindings of both versions of the WIT world `llm-worker:tool/tool-plugin`
//! (0.1.0 and 0.2.0). Nothing else in the crate sees generated types: they are converted at this
//! module's edge, to [`PluginToolMeta`] and [`crate::ToolError`], and the two versions are
//! called through [`PluginPre`] and [`PluginBindings`].

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

pub(crate) use v2::llm_worker::tool::host::{Host as PluginHostImports, Level as LogLevel};

/// The versions of the package this host loads (the `bindgen!` paths above name each; the
/// rules crate's tests check that they agree).
pub(crate) use llm_worker_rules::contract::VERSIONS;

/// One tool as a plugin lists it, whatever its contract version.
#[derive(Debug, Clone)]
pub(crate) struct PluginToolMeta {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) input_schema: String,
    pub(crate) title: Option<String>,
    pub(crate) output_schema: Option<String>,
    pub(crate) annotations: ToolAnnotations,
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
        }
    }
}

impl From<v2::llm_worker::tool::types::ToolMeta> for PluginToolMeta {
    fn from(meta: v2::llm_worker::tool::types::ToolMeta) -> Self {
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
        }
    }
}

impl From<v1::llm_worker::tool::types::ToolError> for crate::ToolError {
    fn from(error: v1::llm_worker::tool::types::ToolError) -> Self {
        use v1::llm_worker::tool::types::ToolError as E;
        match error {
            E::InvalidArgument(text) => Self::InvalidArgument(text),
            E::ExecutionFailed(text) => Self::ExecutionFailed(text),
            E::Internal(text) => Self::Internal(text),
        }
    }
}

impl From<v2::llm_worker::tool::types::ToolError> for crate::ToolError {
    fn from(error: v2::llm_worker::tool::types::ToolError) -> Self {
        use v2::llm_worker::tool::types::ToolError as E;
        match error {
            E::InvalidArgument(text) => Self::InvalidArgument(text),
            E::ExecutionFailed(text) => Self::ExecutionFailed(text),
            E::Internal(text) => Self::Internal(text),
        }
    }
}

/// A component checked against one version of the world, ready to instantiate.
pub(crate) enum PluginPre<T: 'static> {
    V1(v1::ToolPluginPre<T>),
    V2(v2::ToolPluginPre<T>),
}

impl<T: 'static> Clone for PluginPre<T> {
    fn clone(&self) -> Self {
        match self {
            Self::V1(pre) => Self::V1(pre.clone()),
            Self::V2(pre) => Self::V2(pre.clone()),
        }
    }
}

impl<T: Send + 'static> PluginPre<T> {
    /// Checks `pre`'s exports against the world of `version` ("0.1.0" or "0.2.0").
    pub(crate) fn new(version: &str, pre: InstancePre<T>) -> wasmtime::Result<Self> {
        if version == VERSIONS[0] {
            v1::ToolPluginPre::new(pre).map(Self::V1)
        } else {
            v2::ToolPluginPre::new(pre).map(Self::V2)
        }
    }

    /// The contract version.
    pub(crate) fn version(&self) -> &'static str {
        match self {
            Self::V1(_) => VERSIONS[0],
            Self::V2(_) => VERSIONS[1],
        }
    }

    pub(crate) fn engine(&self) -> &wasmtime::Engine {
        match self {
            Self::V1(pre) => pre.engine(),
            Self::V2(pre) => pre.engine(),
        }
    }

    pub(crate) async fn instantiate_async(
        &self,
        store: &mut Store<T>,
    ) -> wasmtime::Result<PluginBindings> {
        Ok(match self {
            Self::V1(pre) => PluginBindings::V1(pre.instantiate_async(store).await?),
            Self::V2(pre) => PluginBindings::V2(pre.instantiate_async(store).await?),
        })
    }
}

/// Adds the 0.2.0 world's host interface to `linker` (a 0.1.0 component does not import it).
pub(crate) fn add_host_imports<T: PluginHostImports + Send + 'static>(
    linker: &mut Linker<T>,
) -> wasmtime::Result<()> {
    v2::llm_worker::tool::host::add_to_linker::<T, wasmtime::component::HasSelf<T>>(
        linker,
        |state| state,
    )
}

/// A live instance's exports.
pub(crate) enum PluginBindings {
    V1(v1::ToolPlugin),
    V2(v2::ToolPlugin),
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
        })
    }

    pub(crate) async fn call_execute<T: Send>(
        &self,
        store: &mut Store<T>,
        name: &str,
        input_json: &str,
    ) -> wasmtime::Result<Result<String, crate::ToolError>> {
        Ok(match self {
            Self::V1(b) => b
                .call_execute(store, name, input_json)
                .await?
                .map_err(Into::into),
            Self::V2(b) => b
                .call_execute(store, name, input_json)
                .await?
                .map_err(Into::into),
        })
    }
}
