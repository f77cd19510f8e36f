//! The tool itself: its immutable [`ToolMeta`], the [`Tool`] trait, [`ToolError`], the
//! [`ToolDefinition`] factory that creates both at registration, and the [`ToolRegistry`]
//! that lists a type's tools and serves its resources and prompts.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::content::{
    Completion, CompletionRef, Prompt, PromptMeta, RequestError, ResourceContents, ResourceMeta,
    ResourceTemplate, ToolOutput,
};

/// What the model sees of a tool: its name, description and JSON input schema; optionally a
/// human-readable title, the JSON schema of its structured output and hints about its
/// behaviour.
///
/// Fixed at registration and never changed afterwards; hooks read it, nothing writes it.
/// Build it with [`ToolMeta::new`] and the builder methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolMeta {
    /// The tool's name, unique within a worker.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the tool's input (a JSON object).
    pub input_schema: Value,
    /// A short human-readable name for user interfaces (MCP's `title`).
    pub title: Option<String>,
    /// JSON Schema of the tool's result when it is a JSON object (MCP's `outputSchema`): a
    /// tool with one returns JSON text matching it.
    pub output_schema: Option<Value>,
    /// Hints about what the tool does to the world (MCP's `annotations`).
    pub annotations: ToolAnnotations,
    /// Whether its calls may, or must, run as tasks (MCP's tasks extension): set with
    /// `#[tool(task = "optional")]`. Plugins declare it from contract 1.0.0.
    pub task_support: TaskSupport,
}

/// Whether a tool's calls may run as tasks: the client gets a task and asks for the result
/// later (MCP's tasks extension). A declaration: the host decides what it offers.
///
/// A call becomes the task when it says so, with `task::start()` (in a plugin,
/// `llm_worker_guest::task::start`, which `#[tool(task = …)]` calls once the input is read
/// unless the tool is marked `manual_start`; in a native tool, `llm_worker::task::start`).
/// Until then it runs inside its request, and a call that never says so is answered as it
/// ended (a `Required` tool's with a task that ended).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TaskSupport {
    /// Never: every call is answered when it ends (the default).
    #[default]
    Forbidden,
    /// When the client can take a task.
    Optional,
    /// Always: a client that cannot take a task cannot call it.
    Required,
}

/// Hints about a tool's behaviour, as MCP defines them: `None` means "not said".
///
/// They are hints, not guarantees: a client decides with them what to run without asking. For
/// plugins the host keeps only what the sandbox policy makes true (see the README).
///
/// Serialised as MCP spells them (`readOnlyHint`, …), leaving out those not said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// The tool does not change its environment.
    #[serde(rename = "readOnlyHint", skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The tool may destroy or overwrite things (meaningful when not read-only).
    #[serde(rename = "destructiveHint", skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Calling it again with the same input has no further effect.
    #[serde(rename = "idempotentHint", skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// The tool reaches entities outside the host (the internet, other services).
    #[serde(rename = "openWorldHint", skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

impl ToolAnnotations {
    /// True when no hint is given.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl ToolMeta {
    /// A tool named `name`, with an empty description and an empty object schema.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({ "type": "object" }),
            title: None,
            output_schema: None,
            annotations: ToolAnnotations::default(),
            task_support: TaskSupport::Forbidden,
        }
    }

    /// Sets whether its calls may, or must, run as tasks.
    #[must_use]
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.task_support = support;
        self
    }

    /// Sets the human-readable title.
    #[must_use]
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the JSON Schema of the tool's structured (JSON object) result.
    #[must_use]
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Sets the behaviour hints.
    #[must_use]
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// Sets the description.
    pub fn description(mut self, desc: impl Into<String>) -> Self {
        self.description = desc.into();
        self
    }

    /// Sets the JSON Schema of the input.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }
}

/// The logic of a tool. It may keep state: the instance created at registration serves every
/// call of that session.
///
/// A tool knows nothing of its metadata and nothing of WebAssembly: native tools, plugin tools
/// and the host's proxies for plugin tools implement the same trait.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Runs the tool with its input, a JSON object as text.
    async fn execute(&self, input_json: &str) -> Result<String, ToolError>;

    /// Runs the tool and returns what it says as content blocks (images, audio, resources,
    /// mixed) and an optional structured value: the path MCP uses, beside the spec's text
    /// path.
    ///
    /// By default it wraps [`execute`](Self::execute) in one text block. A tool that says more
    /// than text implements both, `execute` returning the text form
    /// ([`ToolOutput::to_text`]), as the host's proxies of plugin tools do.
    async fn call(&self, input_json: &str) -> Result<ToolOutput, ToolError> {
        self.execute(input_json).await.map(ToolOutput::text)
    }
}

/// Why a tool call failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The input does not fit the tool (bad JSON, a missing field, a value out of range).
    #[error("Invalid argument: {0}")]
    InvalidArgument(String),
    /// The input was fine but the tool could not do its work.
    #[error("Execution failed: {0}")]
    ExecutionFailed(String),
    /// A bug or broken state in the tool or its host (for plugins: a trap, a limit hit).
    #[error("Internal error: {0}")]
    Internal(String),
}

/// A factory creating a tool's metadata and its instance together.
///
/// It is called once, at registration (not lazily on the first call); the instance it returns
/// serves every call of that registration.
pub type ToolDefinition = Arc<dyn Fn() -> (ToolMeta, Arc<dyn Tool>) + Send + Sync>;

/// The definition a host's `Worker` registers: the same factory as [`ToolDefinition`].
pub type WorkerToolDefinition = ToolDefinition;

/// What [`ToolRegistry::read_resource_async`] and [`ToolRegistry::get_prompt_async`] return:
/// a future of the plugin's one thread.
pub type RegistryFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

/// A type whose methods are tools, resources and prompts: implemented by `#[tool_registry]`
/// for the whole `impl` block. It lists every `#[tool]` method's definition in declaration
/// order, and serves the `#[resource]` and `#[prompt]` methods (with their completions) from
/// the same value.
///
/// The provided methods are what a registry without resources or prompts answers: empty
/// lists, and [`RequestError::NotFound`] for anything asked by name.
pub trait ToolRegistry {
    /// One definition per `#[tool]` method.
    fn tool_definitions(&self) -> Vec<ToolDefinition>;

    /// The resources offered now: one per `#[resource(uri = …)]` method.
    fn resources(&self) -> Vec<ResourceMeta> {
        Vec::new()
    }

    /// The URI templates offered: one per `#[resource(template = …)]` method.
    fn resource_templates(&self) -> Vec<ResourceTemplate> {
        Vec::new()
    }

    /// Reads the resource `uri`: a listed one, or one matching a template.
    ///
    /// # Errors
    /// [`RequestError::NotFound`] for a URI that is neither; otherwise what the resource's
    /// method returned.
    fn read_resource(&self, uri: &str) -> Result<Vec<ResourceContents>, RequestError> {
        Err(RequestError::NotFound(format!(
            "no resource '{uri}': this plugin offers no resources"
        )))
    }

    /// Reads the resource `uri` as the plugin's `read-resource` export does: an `async`
    /// resource method is awaited, so that while it waits (on a question, a request, a timer)
    /// the instance's other calls run. `#[tool_registry]` writes it beside
    /// [`read_resource`](Self::read_resource), which runs such a method to its end in place;
    /// the provided one calls `read_resource`.
    ///
    /// A registry written by hand that hands reads to another (a wrapper) overrides both, each
    /// calling the other registry's method of its kind ([`forward_offerings!`](crate::forward_offerings)
    /// does): overriding only `read_resource` runs the other registry's `async` resources in
    /// place, holding the instance for the whole read; overriding only this one leaves
    /// `read_resource` (what native unit tests call) answering that there are no resources.
    ///
    /// # Errors
    /// As [`read_resource`](Self::read_resource).
    fn read_resource_async<'a>(
        &'a self,
        uri: &'a str,
    ) -> RegistryFuture<'a, Result<Vec<ResourceContents>, RequestError>> {
        Box::pin(async move { self.read_resource(uri) })
    }

    /// The prompts offered now: one per `#[prompt]` method.
    fn prompts(&self) -> Vec<PromptMeta> {
        Vec::new()
    }

    /// Renders the prompt `name` with its arguments, as (name, value) pairs.
    ///
    /// # Errors
    /// [`RequestError::NotFound`] for an unknown prompt, [`RequestError::InvalidArgument`] for
    /// a missing or unknown argument; otherwise what the prompt's method returned.
    fn get_prompt(
        &self,
        name: &str,
        arguments: &[(String, String)],
    ) -> Result<Prompt, RequestError> {
        let _ = arguments;
        Err(RequestError::NotFound(format!(
            "no prompt '{name}': this plugin offers no prompts"
        )))
    }

    /// Renders the prompt `name` as the plugin's `get-prompt` export does: an `async` prompt
    /// method is awaited, so that while it waits the instance's other calls run.
    /// `#[tool_registry]` writes it beside [`get_prompt`](Self::get_prompt); the provided one
    /// calls `get_prompt`. A wrapper overrides both, as for
    /// [`read_resource_async`](Self::read_resource_async).
    ///
    /// # Errors
    /// As [`get_prompt`](Self::get_prompt).
    fn get_prompt_async<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a [(String, String)],
    ) -> RegistryFuture<'a, Result<Prompt, RequestError>> {
        Box::pin(async move { self.get_prompt(name, arguments) })
    }

    /// Suggests values for the argument `argument` of `reference`, typed so far as `value`.
    /// An argument without a `#[complete(…)]` method gets an empty completion.
    ///
    /// # Errors
    /// [`RequestError::NotFound`] for an unknown prompt or template,
    /// [`RequestError::InvalidArgument`] for an argument it does not have.
    fn complete(
        &self,
        reference: &CompletionRef,
        argument: &str,
        value: &str,
    ) -> Result<Completion, RequestError> {
        let _ = (argument, value);
        Err(RequestError::NotFound(match reference {
            CompletionRef::Prompt(name) => {
                format!("no prompt '{name}': this plugin offers no prompts")
            }
            CompletionRef::ResourceTemplate(template) => format!(
                "no resource template '{template}': this plugin offers no resource templates"
            ),
        }))
    }
}

/// Inside an `impl ToolRegistry` for a type that wraps another registry (to add or change
/// tools, or to join one registry's tools with another's prompts), writes the methods other
/// than `tool_definitions` as calls to the wrapped registry, `self.FIELD`:
///
/// ```
/// use llm_worker_guest::{ToolDefinition, ToolRegistry, forward_offerings, tool, tool_registry};
///
/// #[derive(Clone, Default)]
/// pub struct Notes;
///
/// #[tool_registry]
/// impl Notes {
///     /// Counts the notes.
///     #[tool]
///     fn count_notes(&self) -> u32 {
///         0
///     }
/// }
///
/// /// `Notes` with a tool made by hand beside its own.
/// #[derive(Default)]
/// pub struct Plugin(Notes);
///
/// impl ToolRegistry for Plugin {
///     fn tool_definitions(&self) -> Vec<ToolDefinition> {
///         let tools = self.0.tool_definitions();
///         // … push a hand-made definition, or change the metas …
///         tools
///     }
///
///     forward_offerings!(0);
/// }
/// # assert_eq!(Plugin::default().tool_definitions().len(), 1);
/// ```
#[macro_export]
macro_rules! forward_offerings {
    ($field:tt) => {
        fn resources(&self) -> ::std::vec::Vec<$crate::ResourceMeta> {
            $crate::ToolRegistry::resources(&self.$field)
        }

        fn resource_templates(&self) -> ::std::vec::Vec<$crate::ResourceTemplate> {
            $crate::ToolRegistry::resource_templates(&self.$field)
        }

        fn read_resource(
            &self,
            uri: &str,
        ) -> ::std::result::Result<::std::vec::Vec<$crate::ResourceContents>, $crate::RequestError>
        {
            $crate::ToolRegistry::read_resource(&self.$field, uri)
        }

        fn read_resource_async<'a>(
            &'a self,
            uri: &'a str,
        ) -> $crate::RegistryFuture<
            'a,
            ::std::result::Result<::std::vec::Vec<$crate::ResourceContents>, $crate::RequestError>,
        > {
            $crate::ToolRegistry::read_resource_async(&self.$field, uri)
        }

        fn prompts(&self) -> ::std::vec::Vec<$crate::PromptMeta> {
            $crate::ToolRegistry::prompts(&self.$field)
        }

        fn get_prompt_async<'a>(
            &'a self,
            name: &'a str,
            arguments: &'a [(::std::string::String, ::std::string::String)],
        ) -> $crate::RegistryFuture<'a, ::std::result::Result<$crate::Prompt, $crate::RequestError>>
        {
            $crate::ToolRegistry::get_prompt_async(&self.$field, name, arguments)
        }

        fn get_prompt(
            &self,
            name: &str,
            arguments: &[(::std::string::String, ::std::string::String)],
        ) -> ::std::result::Result<$crate::Prompt, $crate::RequestError> {
            $crate::ToolRegistry::get_prompt(&self.$field, name, arguments)
        }

        fn complete(
            &self,
            reference: &$crate::CompletionRef,
            argument: &str,
            value: &str,
        ) -> ::std::result::Result<$crate::Completion, $crate::RequestError> {
            $crate::ToolRegistry::complete(&self.$field, reference, argument, value)
        }
    };
}
