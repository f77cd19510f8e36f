//! The generated guest bindings of the world `tool-plugin` (contract 0.3.0), and the
//! conversions between their records and the crate's own types. Only [`export_plugin!`] and
//! the crate's host calls use them.
//!
//! [`export_plugin!`]: crate::export_plugin

// The generated code: undocumented, and its lowering functions take one argument per flat value.
#![allow(missing_docs, clippy::too_many_arguments)]

wit_bindgen::generate!({
    path: "../wit/1.0.0",
    world: "tool-plugin",
    pub_export_macro: true,
    export_macro_name: "__export_tool_plugin",
    default_bindings_module: "::llm_worker_guest::__private::bindings",
    runtime_path: "::llm_worker_guest::__private::bindings::wit_bindgen::rt",
});
#[doc(hidden)]
pub use wit_bindgen;

use self::llm_worker::tool::client as wit_client;
use self::llm_worker::tool::types as wit;
use crate::export::Plugin;
use crate::tool::ToolRegistry;

impl From<crate::ToolError> for ToolError {
    fn from(error: crate::ToolError) -> Self {
        match error {
            crate::ToolError::InvalidArgument(text) => Self::InvalidArgument(text),
            crate::ToolError::ExecutionFailed(text) => Self::ExecutionFailed(text),
            crate::ToolError::Internal(text) => Self::Internal(text),
        }
    }
}

impl From<crate::RequestError> for RequestError {
    fn from(error: crate::RequestError) -> Self {
        match error {
            crate::RequestError::NotFound(text) => Self::NotFound(text),
            crate::RequestError::InvalidArgument(text) => Self::InvalidArgument(text),
            crate::RequestError::Internal(text) => Self::Internal(text),
        }
    }
}

impl From<crate::Media> for wit::Media {
    fn from(media: crate::Media) -> Self {
        Self {
            mime_type: media.mime_type,
            data: media.data,
        }
    }
}

impl From<wit::Media> for crate::Media {
    fn from(media: wit::Media) -> Self {
        Self {
            mime_type: media.mime_type,
            data: media.data,
        }
    }
}

impl From<crate::ResourceContents> for ResourceContents {
    fn from(contents: crate::ResourceContents) -> Self {
        Self {
            uri: contents.uri,
            mime_type: contents.mime_type,
            data: match contents.data {
                crate::ResourceData::Text(text) => wit::ResourceData::Text(text),
                crate::ResourceData::Blob(bytes) => wit::ResourceData::Blob(bytes),
            },
        }
    }
}

impl From<ResourceContents> for crate::ResourceContents {
    fn from(contents: ResourceContents) -> Self {
        Self {
            uri: contents.uri,
            mime_type: contents.mime_type,
            data: match contents.data {
                wit::ResourceData::Text(text) => crate::ResourceData::Text(text),
                wit::ResourceData::Blob(bytes) => crate::ResourceData::Blob(bytes),
            },
        }
    }
}

impl From<crate::ResourceMeta> for ResourceMeta {
    fn from(meta: crate::ResourceMeta) -> Self {
        Self {
            uri: meta.uri,
            name: meta.name,
            title: meta.title,
            description: meta.description,
            mime_type: meta.mime_type,
            size: meta.size,
        }
    }
}

impl From<ResourceMeta> for crate::ResourceMeta {
    fn from(meta: ResourceMeta) -> Self {
        Self {
            uri: meta.uri,
            name: meta.name,
            title: meta.title,
            description: meta.description,
            mime_type: meta.mime_type,
            size: meta.size,
        }
    }
}

impl From<crate::ResourceTemplate> for ResourceTemplate {
    fn from(template: crate::ResourceTemplate) -> Self {
        Self {
            uri_template: template.uri_template,
            name: template.name,
            title: template.title,
            description: template.description,
            mime_type: template.mime_type,
        }
    }
}

impl From<crate::Content> for wit::Content {
    fn from(content: crate::Content) -> Self {
        match content {
            crate::Content::Text(text) => Self::Text(text),
            crate::Content::Image(media) => Self::Image(media.into()),
            crate::Content::Audio(media) => Self::Audio(media.into()),
            crate::Content::Resource(contents) => Self::Embedded(contents.into()),
            crate::Content::Link(meta) => Self::Link(meta.into()),
        }
    }
}

impl From<wit::Content> for crate::Content {
    fn from(content: wit::Content) -> Self {
        match content {
            wit::Content::Text(text) => Self::Text(text),
            wit::Content::Image(media) => Self::Image(media.into()),
            wit::Content::Audio(media) => Self::Audio(media.into()),
            wit::Content::Embedded(contents) => Self::Resource(contents.into()),
            wit::Content::Link(meta) => Self::Link(meta.into()),
        }
    }
}

impl From<crate::Role> for wit::Role {
    fn from(role: crate::Role) -> Self {
        match role {
            crate::Role::User => Self::User,
            crate::Role::Assistant => Self::Assistant,
        }
    }
}

impl From<wit::Role> for crate::Role {
    fn from(role: wit::Role) -> Self {
        match role {
            wit::Role::User => Self::User,
            wit::Role::Assistant => Self::Assistant,
        }
    }
}

impl From<crate::Message> for wit::Message {
    fn from(message: crate::Message) -> Self {
        Self {
            role: message.role.into(),
            content: message.content.into(),
        }
    }
}

impl From<crate::ToolOutput> for ToolOutput {
    fn from(output: crate::ToolOutput) -> Self {
        Self {
            content: output.content.into_iter().map(Into::into).collect(),
            structured: output.structured.as_ref().map(ToString::to_string),
            is_error: output.is_error,
        }
    }
}

impl From<crate::PromptMeta> for PromptMeta {
    fn from(meta: crate::PromptMeta) -> Self {
        Self {
            name: meta.name,
            title: meta.title,
            description: meta.description,
            arguments: meta
                .arguments
                .into_iter()
                .map(|argument| wit::PromptArgument {
                    name: argument.name,
                    title: argument.title,
                    description: argument.description,
                    required: argument.required,
                })
                .collect(),
        }
    }
}

impl From<crate::Prompt> for Prompt {
    fn from(prompt: crate::Prompt) -> Self {
        Self {
            description: prompt.description,
            messages: prompt.messages.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<crate::Completion> for Completion {
    fn from(completion: crate::Completion) -> Self {
        Self {
            values: completion.values,
            total: completion.total,
            has_more: completion.has_more,
        }
    }
}

impl From<crate::SamplingRequest> for wit_client::SamplingRequest {
    fn from(request: crate::SamplingRequest) -> Self {
        Self {
            messages: request.messages.into_iter().map(Into::into).collect(),
            system_prompt: request.system_prompt,
            max_tokens: request.max_tokens,
            temperature: request.temperature,
            stop_sequences: request.stop_sequences,
            model_hints: request.model_hints,
        }
    }
}

impl From<wit_client::SamplingAnswer> for crate::SamplingAnswer {
    fn from(answer: wit_client::SamplingAnswer) -> Self {
        Self {
            role: answer.role.into(),
            content: answer.content.into(),
            model: answer.model,
            stop_reason: answer.stop_reason,
        }
    }
}

impl From<wit_client::Root> for crate::Root {
    fn from(root: wit_client::Root) -> Self {
        Self {
            uri: root.uri,
            name: root.name,
        }
    }
}

impl From<wit_client::QuestionError> for crate::QuestionError {
    fn from(error: wit_client::QuestionError) -> Self {
        match error {
            wit_client::QuestionError::Unsupported(text) => Self::Unsupported(text),
            wit_client::QuestionError::Denied(text) => Self::Denied(text),
            wit_client::QuestionError::Failed(text) => Self::Failed(text),
            wit_client::QuestionError::Deferred(text) => Self::Deferred(text),
        }
    }
}

/// Converts the plugin's tool list to the WIT records.
pub fn tool_metas<R: ToolRegistry>(plugin: &Plugin<R>) -> Vec<ToolMeta> {
    plugin
        .metas()
        .map(|meta| ToolMeta {
            name: meta.name.clone(),
            description: meta.description.clone(),
            input_schema: meta.input_schema.to_string(),
            title: meta.title.clone(),
            output_schema: meta.output_schema.as_ref().map(ToString::to_string),
            annotations: wit::Annotations {
                read_only: meta.annotations.read_only,
                destructive: meta.annotations.destructive,
                idempotent: meta.annotations.idempotent,
                open_world: meta.annotations.open_world,
            },
            task_support: match meta.task_support {
                crate::TaskSupport::Forbidden => wit::TaskSupport::Forbidden,
                crate::TaskSupport::Optional => wit::TaskSupport::Optional,
                crate::TaskSupport::Required => wit::TaskSupport::Required,
            },
        })
        .collect()
}

/// `execute`: the tool's content path, until the host cancels the call.
pub async fn execute<R: ToolRegistry>(
    plugin: &Plugin<R>,
    name: &str,
    input_json: &str,
) -> Result<ToolOutput, ToolError> {
    let call = plugin.call(name, input_json);
    match crate::export::until_cancelled(call).await {
        Some(result) => result.map(Into::into).map_err(Into::into),
        None => Err(ToolError::ExecutionFailed(format!(
            "tool '{name}' was cancelled by the host"
        ))),
    }
}

/// `resources`.
pub fn resources<R: ToolRegistry>(plugin: &Plugin<R>) -> Vec<ResourceMeta> {
    let list = plugin.registry().resources();
    list.into_iter().map(Into::into).collect()
}

/// `resource-templates`.
pub fn resource_templates<R: ToolRegistry>(plugin: &Plugin<R>) -> Vec<ResourceTemplate> {
    let list = plugin.registry().resource_templates();
    list.into_iter().map(Into::into).collect()
}

/// `read-resource`: the resource's method awaited (the instance's other calls run while it
/// waits), until the host cancels the read.
pub async fn read_resource<R: ToolRegistry>(
    plugin: &Plugin<R>,
    uri: &str,
) -> Result<Vec<ResourceContents>, RequestError> {
    match crate::export::until_cancelled(plugin.registry().read_resource_async(uri)).await {
        Some(Ok(contents)) => Ok(contents.into_iter().map(Into::into).collect()),
        Some(Err(error)) => Err(error.into()),
        None => Err(RequestError::Internal(format!(
            "the read of '{uri}' was cancelled by the host"
        ))),
    }
}

/// `prompts`.
pub fn prompts<R: ToolRegistry>(plugin: &Plugin<R>) -> Vec<PromptMeta> {
    let list = plugin.registry().prompts();
    list.into_iter().map(Into::into).collect()
}

/// `get-prompt`: the prompt's method awaited (the instance's other calls run while it
/// waits), until the host cancels the rendering.
pub async fn get_prompt<R: ToolRegistry>(
    plugin: &Plugin<R>,
    name: &str,
    arguments: &[(String, String)],
) -> Result<Prompt, RequestError> {
    let rendering = plugin.registry().get_prompt_async(name, arguments);
    match crate::export::until_cancelled(rendering).await {
        Some(result) => result.map(Into::into).map_err(Into::into),
        None => Err(RequestError::Internal(format!(
            "prompt '{name}' was cancelled by the host"
        ))),
    }
}

/// `complete`.
pub fn complete<R: ToolRegistry>(
    plugin: &Plugin<R>,
    reference: CompletionRef,
    argument: &str,
    value: &str,
) -> Result<Completion, RequestError> {
    let reference = match reference {
        CompletionRef::Prompt(name) => crate::CompletionRef::Prompt(name),
        CompletionRef::ResourceTemplate(template) => {
            crate::CompletionRef::ResourceTemplate(template)
        }
    };
    plugin
        .registry()
        .complete(&reference, argument, value)
        .map(Into::into)
        .map_err(Into::into)
}
