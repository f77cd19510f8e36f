//! Our content types in MCP's terms and back: content blocks, resources, templates, prompts,
//! completions, and what a client answers to sampling. Bytes are base64-encoded once, here, as
//! MCP's JSON requires; nothing else is copied or re-encoded on the way.

#![allow(deprecated)]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rmcp::model::{
    self as mcp, AudioContent, ContentBlock, EmbeddedResource, ImageContent, TextContent,
};

use crate::tool::{
    Completion, Content, Media, Message, Prompt, PromptMeta, ResourceContents, ResourceData,
    ResourceMeta, ResourceTemplate, Role,
};

/// A content block as MCP's.
pub(crate) fn block(content: Content) -> ContentBlock {
    match content {
        Content::Text(text) => ContentBlock::text(text),
        Content::Image(media) => {
            ContentBlock::Image(ImageContent::new(encode(&media.data), media.mime_type))
        }
        Content::Audio(media) => {
            ContentBlock::Audio(AudioContent::new(encode(&media.data), media.mime_type))
        }
        Content::Resource(contents) => {
            ContentBlock::Resource(EmbeddedResource::new(resource_contents(contents)))
        }
        Content::Link(mut meta) => {
            // Shown as a listed resource's, which are checked at load: the plugin's result
            // may say anything, so nothing that acts on a terminal or hides text.
            crate::events::shown_plainly(&mut meta.name, false);
            for text in [&mut meta.title, &mut meta.description]
                .into_iter()
                .flatten()
            {
                crate::events::shown_plainly(text, true);
            }
            ContentBlock::ResourceLink(resource(meta))
        }
    }
}

fn encode(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// A resource's contents as MCP's.
pub(crate) fn resource_contents(contents: ResourceContents) -> mcp::ResourceContents {
    match contents.data {
        ResourceData::Text(text) => mcp::ResourceContents::TextResourceContents {
            uri: contents.uri,
            mime_type: contents.mime_type,
            text,
            meta: None,
        },
        ResourceData::Blob(bytes) => mcp::ResourceContents::BlobResourceContents {
            uri: contents.uri,
            mime_type: contents.mime_type,
            blob: encode(&bytes),
            meta: None,
        },
    }
}

/// A listed resource as MCP's.
pub(crate) fn resource(meta: ResourceMeta) -> mcp::Resource {
    let mut resource = mcp::Resource::new(meta.uri, meta.name);
    resource.title = meta.title;
    resource.description = meta.description;
    resource.mime_type = meta.mime_type;
    resource.size = meta.size;
    resource
}

/// A resource template as MCP's.
pub(crate) fn template(template: &ResourceTemplate) -> mcp::ResourceTemplate {
    let mut mcp_template =
        mcp::ResourceTemplate::new(template.uri_template.clone(), template.name.clone());
    mcp_template.title.clone_from(&template.title);
    mcp_template.description.clone_from(&template.description);
    mcp_template.mime_type.clone_from(&template.mime_type);
    mcp_template
}

/// A prompt, as listed, as MCP's.
pub(crate) fn prompt(meta: &PromptMeta) -> mcp::Prompt {
    let arguments = meta
        .arguments
        .iter()
        .map(|argument| {
            let mut mcp_argument = mcp::PromptArgument::new(argument.name.clone());
            mcp_argument.title.clone_from(&argument.title);
            mcp_argument.description.clone_from(&argument.description);
            mcp_argument.required = Some(argument.required);
            mcp_argument
        })
        .collect::<Vec<_>>();
    let mut prompt = mcp::Prompt::new(
        meta.name.clone(),
        meta.description.clone(),
        (!arguments.is_empty()).then_some(arguments),
    );
    prompt.title.clone_from(&meta.title);
    prompt
}

fn role(role: Role) -> mcp::Role {
    match role {
        Role::User => mcp::Role::User,
        Role::Assistant => mcp::Role::Assistant,
    }
}

/// A rendered prompt as MCP's.
pub(crate) fn rendered_prompt(rendered: Prompt) -> mcp::GetPromptResult {
    let messages = rendered
        .messages
        .into_iter()
        .map(|message| mcp::PromptMessage::new(role(message.role), block(message.content)))
        .collect();
    let mut result = mcp::GetPromptResult::new(messages);
    // Checked at load as listed; as rendered, the plugin may say anything.
    result.description = rendered.description.map(|mut description| {
        crate::events::shown_plainly(&mut description, true);
        description
    });
    result
}

/// A completion as MCP's.
pub(crate) fn completion(completion: Completion) -> mcp::CompleteResult {
    let mut info = mcp::CompletionInfo::default();
    // A value is put into the client's field as it is: one that would not show as written
    // (a control or hidden character) is left out.
    info.values = completion
        .values
        .into_iter()
        .filter(|value| !value.chars().any(crate::events::unshowable))
        .collect();
    info.total = completion.total;
    info.has_more = Some(completion.has_more);
    mcp::CompleteResult::new(info)
}

/// A sampling conversation's message as MCP's; resources and links cannot be sampled, so
/// they go as their text.
pub(crate) fn sampling_message(message: &Message) -> mcp::SamplingMessage {
    let content = match &message.content {
        Content::Text(text) => {
            mcp::SamplingMessageContentBlock::Text(TextContent::new(text.clone()))
        }
        Content::Image(media) => mcp::SamplingMessageContentBlock::Image(ImageContent::new(
            encode(&media.data),
            media.mime_type.clone(),
        )),
        Content::Audio(media) => mcp::SamplingMessageContentBlock::Audio(AudioContent::new(
            encode(&media.data),
            media.mime_type.clone(),
        )),
        other => {
            let mut text = String::new();
            other.write_text(&mut text);
            mcp::SamplingMessageContentBlock::Text(TextContent::new(text))
        }
    };
    mcp::SamplingMessage::new(role(message.role), content)
}

/// What a client's model said, in our terms: one text, image or audio block. More blocks,
/// or a tool use or result (the host offered the model no tools), are refused, not skipped.
pub(crate) fn sampled_content(
    content: mcp::SamplingContent<mcp::SamplingMessageContentBlock>,
) -> Result<Content, String> {
    let mut blocks = content.into_vec();
    if blocks.len() != 1 {
        return Err(format!(
            "the client's answer has {} content blocks; the host asks for one (text, image \
             or audio)",
            blocks.len()
        ));
    }
    match blocks.remove(0) {
        mcp::SamplingMessageContentBlock::Text(text) => Ok(Content::Text(text.text)),
        mcp::SamplingMessageContentBlock::Image(image) => {
            decode_media(image.data, image.mime_type).map(Content::Image)
        }
        mcp::SamplingMessageContentBlock::Audio(audio) => {
            decode_media(audio.data, audio.mime_type).map(Content::Audio)
        }
        _ => Err(
            "the client's answer is a tool use or result, but the host offered the \
                  model no tools; answer with text, an image or audio"
                .to_owned(),
        ),
    }
}

fn decode_media(data: String, mime_type: String) -> Result<Media, String> {
    BASE64
        .decode(&data)
        .map(|data| Media { mime_type, data })
        .map_err(|_| "the client's answer is not valid base64".to_owned())
}

/// MCP's role in ours.
pub(crate) fn our_role(role: mcp::Role) -> Role {
    match role {
        mcp::Role::Assistant => Role::Assistant,
        _ => Role::User,
    }
}
