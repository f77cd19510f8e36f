//! The generated host bindings of the WIT world `llm-worker:tool/tool-plugin`. Nothing else in
//! the crate sees generated types: they are converted at this module's edge.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "tool-plugin",
    exports: { default: async },
});

pub(crate) use self::llm_worker::tool::types::{
    ToolError as WitToolError, ToolMeta as WitToolMeta,
};

impl From<WitToolError> for crate::ToolError {
    fn from(error: WitToolError) -> Self {
        match error {
            WitToolError::InvalidArgument(text) => Self::InvalidArgument(text),
            WitToolError::ExecutionFailed(text) => Self::ExecutionFailed(text),
            WitToolError::Internal(text) => Self::Internal(text),
        }
    }
}
