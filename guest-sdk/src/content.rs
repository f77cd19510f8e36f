//! What a tool, a resource or a prompt says beyond plain text: [`Content`] blocks (text,
//! image, audio, an embedded resource, a resource link), a tool's [`ToolOutput`], resources
//! ([`ResourceMeta`], [`ResourceTemplate`], [`ResourceContents`]), prompts ([`PromptMeta`],
//! [`Prompt`]) and [`Completion`]s — contract 0.3.0's types, shared by the host and plugins.

use std::fmt::Write as _;

use serde_json::Value;

/// One block of what a tool, a prompt or a model says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Text.
    Text(String),
    /// An image: its MIME type (`image/png`) and bytes.
    Image(Media),
    /// An audio clip: its MIME type (`audio/wav`) and bytes.
    Audio(Media),
    /// A resource's contents, embedded.
    Resource(ResourceContents),
    /// A link to a resource the client may read.
    Link(ResourceMeta),
}

/// Bytes with their MIME type.
#[derive(Clone, PartialEq, Eq)]
pub struct Media {
    /// The MIME type, such as `image/png`.
    pub mime_type: String,
    /// The bytes.
    pub data: Vec<u8>,
}

impl std::fmt::Debug for Media {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Media")
            .field("mime_type", &self.mime_type)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }

    /// An image block.
    pub fn image(mime_type: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        Self::Image(Media {
            mime_type: mime_type.into(),
            data: data.into(),
        })
    }

    /// An audio block.
    pub fn audio(mime_type: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        Self::Audio(Media {
            mime_type: mime_type.into(),
            data: data.into(),
        })
    }

    /// How many bytes the block carries (its text, its data, its URIs and names): what output
    /// limits count.
    #[must_use]
    pub fn size(&self) -> usize {
        match self {
            Self::Text(text) => text.len(),
            Self::Image(media) | Self::Audio(media) => media.mime_type.len() + media.data.len(),
            Self::Resource(contents) => contents.size(),
            Self::Link(meta) => meta.size_of_text(),
        }
    }

    /// The block as text, for callers that take text only: text as it is; anything else
    /// described in one bracketed line (an embedded text resource also gives its text).
    pub fn write_text(&self, out: &mut String) {
        match self {
            Self::Text(text) => out.push_str(text),
            Self::Image(media) => describe_media(out, "image", media),
            Self::Audio(media) => describe_media(out, "audio", media),
            Self::Resource(contents) => match &contents.data {
                ResourceData::Text(text) => out.push_str(text),
                ResourceData::Blob(bytes) => {
                    let _ = write!(out, "[resource {}", contents.uri);
                    if let Some(mime) = &contents.mime_type {
                        let _ = write!(out, ", {mime}");
                    }
                    let _ = write!(out, ", {} bytes]", bytes.len());
                }
            },
            Self::Link(meta) => {
                let _ = write!(out, "[resource link {}: {}]", meta.uri, meta.name);
            }
        }
    }
}

fn describe_media(out: &mut String, kind: &str, media: &Media) {
    let _ = write!(
        out,
        "[{kind}: {}, {} bytes]",
        media.mime_type,
        media.data.len()
    );
}

/// What a resource holds.
#[derive(Clone, PartialEq, Eq)]
pub enum ResourceData {
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl std::fmt::Debug for ResourceData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Text(text) => f.debug_tuple("Text").field(text).finish(),
            Self::Blob(bytes) => write!(f, "Blob({} bytes)", bytes.len()),
        }
    }
}

/// The contents of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceContents {
    /// The resource's URI.
    pub uri: String,
    /// Its MIME type, when known.
    pub mime_type: Option<String>,
    /// What it holds.
    pub data: ResourceData,
}

impl ResourceContents {
    /// A text resource.
    pub fn text(uri: impl Into<String>, mime_type: Option<&str>, text: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            mime_type: mime_type.map(str::to_owned),
            data: ResourceData::Text(text.into()),
        }
    }

    /// A binary resource.
    pub fn blob(
        uri: impl Into<String>,
        mime_type: Option<&str>,
        bytes: impl Into<Vec<u8>>,
    ) -> Self {
        Self {
            uri: uri.into(),
            mime_type: mime_type.map(str::to_owned),
            data: ResourceData::Blob(bytes.into()),
        }
    }

    /// Bytes carried: URI, MIME type and data.
    #[must_use]
    pub fn size(&self) -> usize {
        self.uri.len()
            + self.mime_type.as_ref().map_or(0, String::len)
            + match &self.data {
                ResourceData::Text(text) => text.len(),
                ResourceData::Blob(bytes) => bytes.len(),
            }
    }
}

/// A resource, as listed (and as a link in a tool's result).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceMeta {
    /// Its URI, unique within its plugin.
    pub uri: String,
    /// A name for it.
    pub name: String,
    /// A human-readable title.
    pub title: Option<String>,
    /// What it holds.
    pub description: Option<String>,
    /// Its MIME type, when known.
    pub mime_type: Option<String>,
    /// Its size in bytes, when known.
    pub size: Option<u64>,
}

impl ResourceMeta {
    /// A resource `uri` called `name`.
    pub fn new(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            name: name.into(),
            ..Self::default()
        }
    }

    fn size_of_text(&self) -> usize {
        self.uri.len()
            + self.name.len()
            + [&self.title, &self.description, &self.mime_type]
                .iter()
                .map(|text| text.as_ref().map_or(0, String::len))
                .sum::<usize>()
    }
}

/// A family of resources named by a URI template (`notes://{date}`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceTemplate {
    /// The URI template (RFC 6570 level 1: `{name}` variables).
    pub uri_template: String,
    /// A name for the family.
    pub name: String,
    /// A human-readable title.
    pub title: Option<String>,
    /// What its resources hold.
    pub description: Option<String>,
    /// The MIME type of its resources, when they share one.
    pub mime_type: Option<String>,
}

/// What a tool returns on the content path ([`Tool::call`](crate::Tool::call)): content blocks
/// and, optionally, a structured value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolOutput {
    /// The content blocks, in order.
    pub content: Vec<Content>,
    /// A structured value (an object), for a tool with an output schema.
    pub structured: Option<Value>,
    /// The tool failed and says how with its content (MCP's `isError`).
    pub is_error: bool,
}

impl ToolOutput {
    /// One text block: what a tool's [`execute`](crate::Tool::execute) text becomes.
    pub fn text(text: impl Into<String>) -> Self {
        Self::content(vec![Content::Text(text.into())])
    }

    /// These blocks.
    #[must_use]
    pub fn content(content: Vec<Content>) -> Self {
        Self {
            content,
            structured: None,
            is_error: false,
        }
    }

    /// A failure told with these blocks (MCP's `isError`).
    #[must_use]
    pub fn error(content: Vec<Content>) -> Self {
        Self {
            content,
            structured: None,
            is_error: true,
        }
    }

    /// The output as text, as [`Tool::execute`](crate::Tool::execute) returns it: the blocks'
    /// text ([`Content::write_text`]) one per line, or, with no content, the structured
    /// value's JSON.
    #[must_use]
    pub fn to_text(&self) -> String {
        if self.content.is_empty() {
            return self
                .structured
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default();
        }
        let mut out = String::new();
        for (at, block) in self.content.iter().enumerate() {
            if at > 0 {
                out.push('\n');
            }
            block.write_text(&mut out);
        }
        out
    }

    /// The output as text, like [`to_text`](Self::to_text), without copying a single text
    /// block.
    #[must_use]
    pub fn into_text(mut self) -> String {
        if let [Content::Text(_)] = self.content.as_slice()
            && let Some(Content::Text(text)) = self.content.pop()
        {
            return text;
        }
        self.to_text()
    }

    /// Bytes carried by the content blocks.
    #[must_use]
    pub fn size(&self) -> usize {
        self.content.iter().map(Content::size).sum::<usize>()
    }
}

/// A prompt's argument.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PromptArgument {
    /// Its name.
    pub name: String,
    /// A human-readable title.
    pub title: Option<String>,
    /// What to give.
    pub description: Option<String>,
    /// Whether it must be given.
    pub required: bool,
}

/// A prompt (a message template) the user may pick.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PromptMeta {
    /// Its name, unique within its plugin.
    pub name: String,
    /// A human-readable title.
    pub title: Option<String>,
    /// What it is for.
    pub description: Option<String>,
    /// Its arguments, in order.
    pub arguments: Vec<PromptArgument>,
}

/// Who says a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The user.
    User,
    /// The assistant (the model).
    Assistant,
}

/// One message of a prompt or of a sampling conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who says it.
    pub role: Role,
    /// What is said.
    pub content: Content,
}

impl Message {
    /// The user says `content`.
    pub fn user(content: impl Into<Content>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }

    /// The assistant says `content`.
    pub fn assistant(content: impl Into<Content>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

/// A rendered prompt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prompt {
    /// What this rendering is.
    pub description: Option<String>,
    /// The messages, in order.
    pub messages: Vec<Message>,
}

/// What a completion is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompletionRef {
    /// An argument of the prompt of this name.
    Prompt(String),
    /// A variable of the resource template with this URI template.
    ResourceTemplate(String),
}

/// Suggested values for an argument being typed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Completion {
    /// The values, best first (at most 100).
    pub values: Vec<String>,
    /// How many there are in all, when known.
    pub total: Option<u32>,
    /// Whether there are more than `values` holds.
    pub has_more: bool,
}

/// Why a request other than a tool call (reading a resource, rendering a prompt, completing
/// an argument) failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// No such resource, prompt or template.
    #[error("Not found: {0}")]
    NotFound(String),
    /// The request does not fit (a missing or bad argument).
    #[error("Invalid argument: {0}")]
    InvalidArgument(String),
    /// A bug or broken state in the plugin or its host.
    #[error("Internal error: {0}")]
    Internal(String),
}
