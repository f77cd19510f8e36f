//! [`ToolServer`] owns the registered tools; [`ToolServerHandle`] finds and calls them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde_json::Value;

use crate::tool::{Tool, ToolAnnotations, ToolMeta, WorkerToolDefinition};

/// Tools by name. Ordered: listing needs no sort, and a lookup hashes nothing (a call's
/// lookup is on the hot path; tool counts are small). The metadata is shared, not copied, by
/// a call's lookup: its schemas are the largest part of a tool.
type ToolMap = BTreeMap<String, (Arc<ToolMeta>, Arc<dyn Tool>)>;

/// Owns the map of registered tools. Cloning shares the same map.
#[derive(Clone, Default)]
pub struct ToolServer {
    tools: Arc<Mutex<ToolMap>>,
    tasks: crate::task::TaskStore,
}

impl ToolServer {
    /// An empty tool server.
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle to this server's tools.
    pub fn handle(&self) -> ToolServerHandle {
        ToolServerHandle {
            tools: Arc::clone(&self.tools),
            tasks: self.tasks.clone(),
        }
    }
}

/// A cloneable reference to a [`ToolServer`]'s tools: look tools up, call them, list them.
///
/// Registration goes through a [`Worker`](crate::Worker) only: this does not compile
/// (`E0624`, `register_tool` is private to the crate).
///
/// ```compile_fail,E0624
/// # use std::sync::Arc;
/// # use llm_worker::{Tool, ToolDefinition, ToolError, ToolMeta, Worker};
/// # struct Nop;
/// # #[async_trait::async_trait]
/// # impl Tool for Nop {
/// #     async fn execute(&self, _: &str) -> Result<String, ToolError> {
/// #         Ok(String::new())
/// #     }
/// # }
/// # let def: ToolDefinition =
/// #     Arc::new(|| (ToolMeta::new("nop"), Arc::new(Nop) as Arc<dyn Tool>));
/// let handle = Worker::new().tool_server_handle();
/// handle.register_tool(def).unwrap();
/// ```
#[derive(Clone, Default)]
pub struct ToolServerHandle {
    tools: Arc<Mutex<ToolMap>>,
    /// The tasks started through this handle (and its clones).
    tasks: crate::task::TaskStore,
}

/// A tool definition in the shape sent to a model: name, description and input schema; with
/// the title, output schema and hints where the tool has them (for MCP clients).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LlmToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// JSON Schema of the tool's input.
    pub input_schema: Value,
    /// A short human-readable name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// JSON Schema of the tool's structured result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Behaviour hints.
    #[serde(skip_serializing_if = "ToolAnnotations::is_empty")]
    pub annotations: ToolAnnotations,
}

impl From<&ToolMeta> for LlmToolDefinition {
    fn from(meta: &ToolMeta) -> Self {
        Self {
            name: meta.name.clone(),
            description: meta.description.clone(),
            input_schema: meta.input_schema.clone(),
            title: meta.title.clone(),
            output_schema: meta.output_schema.clone(),
            annotations: meta.annotations,
        }
    }
}

/// Errors of the tool server.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolServerError {
    /// A tool of this name is registered already.
    #[error("Tool with name '{0}' already registered")]
    DuplicateName(String),
    /// No tool of this name is registered.
    #[error("Tool '{0}' not found")]
    ToolNotFound(String),
    /// The tool ran and failed; the text is the tool's error.
    #[error("Tool execution failed: {0}")]
    ToolExecution(String),
    /// A task could not be started or found.
    #[error("Task: {0}")]
    Task(crate::task::TaskError),
}

impl ToolServerHandle {
    fn lock(&self) -> MutexGuard<'_, ToolMap> {
        // A panic while holding this lock cannot leave the map half-updated (every update is a
        // single insert), so a poisoned lock is still safe to use.
        self.tools
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs the factory (creating the tool's instance now) and registers the tool.
    pub(crate) fn register_tool(
        &self,
        factory: WorkerToolDefinition,
    ) -> Result<(), ToolServerError> {
        self.register_tools([factory])
    }

    /// Runs every factory and registers all the tools, or none of them if any name clashes
    /// with a registered tool or with another in the batch.
    pub(crate) fn register_tools(
        &self,
        factories: impl IntoIterator<Item = WorkerToolDefinition>,
    ) -> Result<(), ToolServerError> {
        let created: Vec<(Arc<ToolMeta>, Arc<dyn Tool>)> = factories
            .into_iter()
            .map(|factory| {
                let (meta, tool) = factory();
                (Arc::new(meta), tool)
            })
            .collect();
        self.register_created(created)
    }

    /// Registers tools whose factories have run already (a session re-registering what it
    /// holds), all or none of them.
    pub(crate) fn register_created(
        &self,
        created: Vec<(Arc<ToolMeta>, Arc<dyn Tool>)>,
    ) -> Result<(), ToolServerError> {
        let mut tools = self.lock();
        let mut names = std::collections::HashSet::new();
        for (meta, _) in &created {
            if tools.contains_key(&meta.name) || !names.insert(meta.name.as_str()) {
                return Err(ToolServerError::DuplicateName(meta.name.clone()));
            }
        }
        for (meta, tool) in created {
            tools.insert(meta.name.clone(), (meta, tool));
        }
        Ok(())
    }

    /// The metadata and instance of the tool `name`.
    pub fn get_tool(&self, name: &str) -> Option<(ToolMeta, Arc<dyn Tool>)> {
        self.lookup(name)
            .map(|(meta, tool)| (ToolMeta::clone(&meta), tool))
    }

    /// The metadata and instance of the tool `name`, shared: what a call looks up.
    pub(crate) fn lookup(&self, name: &str) -> Option<(Arc<ToolMeta>, Arc<dyn Tool>)> {
        self.lock()
            .get(name)
            .map(|(meta, tool)| (Arc::clone(meta), Arc::clone(tool)))
    }

    /// Calls the tool `name` with `input_json`.
    pub async fn call_tool(&self, name: &str, input_json: &str) -> Result<String, ToolServerError> {
        let tool = self
            .lock()
            .get(name)
            .map(|(_, tool)| Arc::clone(tool))
            .ok_or_else(|| ToolServerError::ToolNotFound(name.to_owned()))?;
        tool.execute(input_json)
            .await
            .map_err(|e| ToolServerError::ToolExecution(e.to_string()))
    }

    /// Starts the tool `name` with `input_json` as a task: the call runs in the background
    /// (for a plugin, in the session's instance, under the policy's `task_timeout_ms` rather
    /// than `timeout_ms`) and the task is returned at once, working; its progress reports
    /// become its status message. Poll it with
    /// [`task`](Self::task), wait for it with [`wait_task`](Self::wait_task), cancel it with
    /// [`cancel_task`](Self::cancel_task), and [`forget_task`](Self::forget_task) it to
    /// free its place before its time to live runs out. Must be called within a Tokio
    /// runtime.
    ///
    /// As [`call_tool`](Self::call_tool), this runs the tool itself: the `Worker`'s hooks do
    /// not see it. An embedder whose hooks guard the tools (skip some, redact results) runs
    /// their checks before starting a task, and on its result. Nor does a task have the
    /// `Worker`'s question handler or event sinks: its questions fail as unanswerable (a tool
    /// that must ask is called with [`Worker::execute_tool_calls`](crate::Worker), or served
    /// over MCP, whose tasks ask their clients), and its logs reach none of its sinks. A task
    /// still running an hour after it started is stopped.
    ///
    /// # Errors
    /// [`ToolServerError::ToolNotFound`]; [`ToolServerError::Task`] when the task cannot be
    /// started (too many kept, no runtime, a tool that declares it does not run as a task).
    pub fn start_task(
        &self,
        name: &str,
        input_json: &str,
    ) -> Result<crate::task::TaskSnapshot, ToolServerError> {
        let (meta, tool) = self
            .lookup(name)
            .ok_or_else(|| ToolServerError::ToolNotFound(name.to_owned()))?;
        if meta.task_support == crate::tool::TaskSupport::Forbidden {
            return Err(ToolServerError::Task(crate::task::TaskError::NotATask(
                name.to_owned(),
            )));
        }
        let input = input_json.to_owned();
        self.tasks
            .start("", |_| async move { tool.call(&input).await })
            .map_err(ToolServerError::Task)
    }

    /// The task `id` started through this handle, as it stands.
    ///
    /// # Errors
    /// [`ToolServerError::Task`] for an unknown (or expired) id.
    pub fn task(&self, id: &str) -> Result<crate::task::TaskSnapshot, ToolServerError> {
        self.tasks.get("", id).map_err(ToolServerError::Task)
    }

    /// Waits for the task `id` to end, and returns it.
    ///
    /// # Errors
    /// [`ToolServerError::Task`] for an unknown (or expired) id.
    pub async fn wait_task(&self, id: &str) -> Result<crate::task::TaskSnapshot, ToolServerError> {
        self.tasks.wait("", id).await.map_err(ToolServerError::Task)
    }

    /// Cancels the task `id`; a task that ended already is left as it is.
    ///
    /// # Errors
    /// [`ToolServerError::Task`] for an unknown (or expired) id.
    pub fn cancel_task(&self, id: &str) -> Result<crate::task::TaskSnapshot, ToolServerError> {
        self.tasks.cancel("", id).map_err(ToolServerError::Task)
    }

    /// Forgets the task `id`, cancelling it if it still runs, and frees its place among the
    /// tasks kept (64 at most, kept for an hour after they end); returns it as it stood.
    ///
    /// # Errors
    /// [`ToolServerError::Task`] for an unknown (or expired) id.
    pub fn forget_task(&self, id: &str) -> Result<crate::task::TaskSnapshot, ToolServerError> {
        self.tasks
            .forget("", id)
            .ok_or_else(|| ToolServerError::Task(crate::task::not_found(id)))
    }

    /// Every registered tool's definition, sorted by name, so requests are deterministic.
    pub fn tool_definitions_sorted(&self) -> Vec<LlmToolDefinition> {
        // The map is ordered by name.
        self.lock()
            .values()
            .map(|(meta, _)| LlmToolDefinition::from(&**meta))
            .collect()
    }

    /// The names of the registered tools, sorted.
    pub fn tool_names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}
