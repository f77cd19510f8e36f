//! The records of contracts 0.3.0 and 1.0.0 (the same WIT, generated twice) at the module's edge: content blocks, resources, prompts,
//! completions and the questions to the client, converted between the generated types and
//! those of `llm_worker_guest::content` / `::question` that the rest of the crate uses.

use crate::tool::{
    Completion, CompletionRef, Content, Media, Message, Prompt, PromptArgument, PromptMeta,
    RequestError, ResourceContents, ResourceData, ResourceMeta, ResourceTemplate, Role, ToolOutput,
};

/// A 0.3.0 tool's result as the plugin gave it: the structured value is still JSON text, for
/// the host to check before it believes it.
pub(crate) struct RawOutput {
    pub(crate) output: ToolOutput,
    pub(crate) structured: Option<String>,
    /// A 0.1.0 or 0.2.0 result: one text block, which is the structured value's JSON when the
    /// tool has an output schema.
    pub(crate) legacy: bool,
}

impl RawOutput {
    /// The text an older plugin returned.
    pub(crate) fn legacy(text: String) -> Self {
        Self {
            output: ToolOutput::text(text),
            structured: None,
            legacy: true,
        }
    }
}

/// The conversions of the records 0.3.0 and 1.0.0 share, for the generated module `$version`.
macro_rules! records {
    ($($version:ident),+) => {$(
        const _: () = {
            use super::bindings::$version::llm_worker::tool::{client as wit_client, types as wit};
            impl From<wit::ToolOutput> for RawOutput {
                fn from(output: wit::ToolOutput) -> Self {
                    Self {
                        output: ToolOutput {
                            content: output.content.into_iter().map(Into::into).collect(),
                            structured: None,
                            is_error: output.is_error,
                        },
                        structured: output.structured,
                        legacy: false,
                    }
                }
            }

            impl From<wit::Media> for Media {
                fn from(media: wit::Media) -> Self {
                    Self {
                        mime_type: media.mime_type,
                        data: media.data,
                    }
                }
            }

            impl From<Media> for wit::Media {
                fn from(media: Media) -> Self {
                    Self {
                        mime_type: media.mime_type,
                        data: media.data,
                    }
                }
            }

            impl From<wit::ResourceContents> for ResourceContents {
                fn from(contents: wit::ResourceContents) -> Self {
                    Self {
                        uri: contents.uri,
                        mime_type: contents.mime_type,
                        data: match contents.data {
                            wit::ResourceData::Text(text) => ResourceData::Text(text),
                            wit::ResourceData::Blob(bytes) => ResourceData::Blob(bytes),
                        },
                    }
                }
            }

            impl From<ResourceContents> for wit::ResourceContents {
                fn from(contents: ResourceContents) -> Self {
                    Self {
                        uri: contents.uri,
                        mime_type: contents.mime_type,
                        data: match contents.data {
                            ResourceData::Text(text) => wit::ResourceData::Text(text),
                            ResourceData::Blob(bytes) => wit::ResourceData::Blob(bytes),
                        },
                    }
                }
            }

            impl From<wit::ResourceMeta> for ResourceMeta {
                fn from(meta: wit::ResourceMeta) -> Self {
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

            impl From<ResourceMeta> for wit::ResourceMeta {
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

            impl From<wit::ResourceTemplate> for ResourceTemplate {
                fn from(template: wit::ResourceTemplate) -> Self {
                    Self {
                        uri_template: template.uri_template,
                        name: template.name,
                        title: template.title,
                        description: template.description,
                        mime_type: template.mime_type,
                    }
                }
            }

            impl From<wit::Content> for Content {
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

            impl From<Content> for wit::Content {
                fn from(content: Content) -> Self {
                    match content {
                        Content::Text(text) => Self::Text(text),
                        Content::Image(media) => Self::Image(media.into()),
                        Content::Audio(media) => Self::Audio(media.into()),
                        Content::Resource(contents) => Self::Embedded(contents.into()),
                        Content::Link(meta) => Self::Link(meta.into()),
                    }
                }
            }

            impl From<wit::Role> for Role {
                fn from(role: wit::Role) -> Self {
                    match role {
                        wit::Role::User => Self::User,
                        wit::Role::Assistant => Self::Assistant,
                    }
                }
            }

            impl From<Role> for wit::Role {
                fn from(role: Role) -> Self {
                    match role {
                        Role::User => Self::User,
                        Role::Assistant => Self::Assistant,
                    }
                }
            }

            impl From<wit::Message> for Message {
                fn from(message: wit::Message) -> Self {
                    Self {
                        role: message.role.into(),
                        content: message.content.into(),
                    }
                }
            }

            impl From<wit::PromptMeta> for PromptMeta {
                fn from(meta: wit::PromptMeta) -> Self {
                    Self {
                        name: meta.name,
                        title: meta.title,
                        description: meta.description,
                        arguments: meta
                            .arguments
                            .into_iter()
                            .map(|argument| PromptArgument {
                                name: argument.name,
                                title: argument.title,
                                description: argument.description,
                                required: argument.required,
                            })
                            .collect(),
                    }
                }
            }

            impl From<wit::Prompt> for Prompt {
                fn from(prompt: wit::Prompt) -> Self {
                    Self {
                        description: prompt.description,
                        messages: prompt.messages.into_iter().map(Into::into).collect(),
                    }
                }
            }

            impl From<CompletionRef> for wit::CompletionRef {
                fn from(reference: CompletionRef) -> Self {
                    match reference {
                        CompletionRef::Prompt(name) => Self::Prompt(name),
                        CompletionRef::ResourceTemplate(template) => Self::ResourceTemplate(template),
                    }
                }
            }

            impl From<wit::Completion> for Completion {
                fn from(completion: wit::Completion) -> Self {
                    Self {
                        values: completion.values,
                        total: completion.total,
                        has_more: completion.has_more,
                    }
                }
            }

            impl From<wit::RequestError> for RequestError {
                fn from(error: wit::RequestError) -> Self {
                    match error {
                        wit::RequestError::NotFound(text) => Self::NotFound(text),
                        wit::RequestError::InvalidArgument(text) => Self::InvalidArgument(text),
                        wit::RequestError::Internal(text) => Self::Internal(text),
                    }
                }
            }

            impl From<crate::tool::QuestionError> for wit_client::QuestionError {
                fn from(error: crate::tool::QuestionError) -> Self {
                    use crate::tool::QuestionError as E;
                    match error {
                        E::Unsupported(text) => Self::Unsupported(text),
                        E::Denied(text) => Self::Denied(text),
                        E::Failed(text) => Self::Failed(text),
                        E::Deferred(text) => Self::Deferred(text),
                    }
                }
            }

            impl From<wit_client::SamplingRequest> for crate::tool::SamplingRequest {
                fn from(request: wit_client::SamplingRequest) -> Self {
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

            impl From<crate::tool::SamplingAnswer> for wit_client::SamplingAnswer {
                fn from(answer: crate::tool::SamplingAnswer) -> Self {
                    Self {
                        role: answer.role.into(),
                        content: answer.content.into(),
                        model: answer.model,
                        stop_reason: answer.stop_reason,
                    }
                }
            }

            impl From<crate::tool::Root> for wit_client::Root {
                fn from(root: crate::tool::Root) -> Self {
                    Self {
                        uri: root.uri,
                        name: root.name,
                    }
                }
            }

            impl From<crate::tool::ElicitationAnswer> for wit_client::ElicitationAnswer {
                fn from(answer: crate::tool::ElicitationAnswer) -> Self {
                    match answer {
                        crate::tool::ElicitationAnswer::Accept(content) => {
                            Self::Accept(serde_json::Value::Object(content).to_string())
                        }
                        crate::tool::ElicitationAnswer::Decline => Self::Decline,
                        crate::tool::ElicitationAnswer::Cancel => Self::Cancel,
                    }
                }
            }
        };
    )+};
}

records!(v3, v10);
