//! An MCP session's tools: `tools/list` (made once for each version of the session's tools)
//! and `tools/call` through the call pipeline (`crate::call`), the hooks meaning what they
//! mean on a `Worker`; this file keeps only the conversion between rmcp's types and ours.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    ListToolsResult, PaginatedRequestParams, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::catalog::Serving;
use super::request::{Asking, Target};
use super::session::McpServer;
use crate::call::{Aborted, Before};
use crate::hook::{ToolCall, ToolResult};
use crate::plugin::PluginSession;
use crate::tool::{ToolError, ToolMeta, ToolOutput};
use crate::tool_server::LlmToolDefinition;

impl McpServer {
    /// A page of the session's tools.
    pub(super) fn tools_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListToolsResult, ErrorData> {
        let listed = self.listed_tools();
        let (page, next) =
            super::offerings::page(listed.to_vec(), request, self.options.page_size)?;
        let mut result = ListToolsResult::with_all_items(page)
            .with_ttl_ms(super::offerings::TTL_MS)
            .with_cache_scope(rmcp::model::CacheScope::Private);
        result.next_cursor = next;
        Ok(result)
    }

    /// The tool `name` as listed.
    pub(super) fn listed_tool(&self, name: &str) -> Option<Tool> {
        let listed = self.listed_tools();
        // Sorted by name.
        listed
            .binary_search_by(|tool| tool.name.as_ref().cmp(name))
            .ok()
            .map(|at| listed[at].clone())
    }

    /// The session's tools as MCP lists them, made once for each version of them.
    pub(super) fn listed_tools(&self) -> Arc<[Tool]> {
        let (handle, generation) = {
            let mut tools = self.lock();
            tools.refresh();
            (tools.handle(), tools.generation())
        };
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        match &*listed {
            Some((made, tools)) if *made == generation => Arc::clone(tools),
            _ => {
                let tools: Arc<[Tool]> = handle
                    .tool_definitions_sorted()
                    .into_iter()
                    .map(mcp_tool)
                    .collect();
                *listed = Some((generation, Arc::clone(&tools)));
                tools
            }
        }
    }

    /// Runs a `tools/call`: the operator's hooks around the tool, in the request's scopes.
    pub(super) async fn call(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some((meta, tool, serving)) = self.found(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "no tool named '{}'; call tools/list for the tools",
                    request.name
                ),
                None,
            ));
        };
        self.admit()?;
        // A tool that must run as a task needs a client that takes tasks, whatever else the
        // request holds.
        Self::check_task_support(&meta, &context)?;
        let arguments = request.arguments.take().unwrap_or_default();
        let revision = serving.revision;
        let asking = self.asking(
            Target {
                method: "tools/call",
                name: &request.name,
                revision,
            },
            &arguments,
            &mut request.request_state,
            &mut request.input_responses,
            &context,
        )?;
        let call = ToolCall {
            id: context.id.to_string(),
            name: request.name.to_string(),
            input: Value::Object(arguments),
        };
        // The operator's hooks see every call, whatever the front end, and mean the same.
        let identity = super::session::identity(&context.extensions);
        let hooks = self.options.hooks(identity.as_ref());
        // A hook may take its time (an approval): the request's cancellation ends the wait, and
        // what the request holds with it.
        let before = tokio::select! {
            biased;
            () = context.ct.cancelled() => return Err(super::request::cancelled(&request.name)),
            before = hooks.before(call, &meta, tool) => before,
        };
        let (call, tool) = match before {
            Before::Run(call, tool) => (call, tool),
            Before::Skipped(result) => return Ok(call_tool_result(result).into()),
            Before::Aborted(aborted) => return Err(refused_by_hook(&aborted)),
        };
        let ended = Ended {
            call,
            meta,
            tool,
            asked_as: &request.name,
            serving,
        };
        if Self::runs_as_task(&ended.meta, &context) {
            // On the heap: a task's future is ten times a call's, and this one would hold it.
            return Box::pin(self.call_as_task(ended, &asking, context)).await;
        }
        let input = ended.call.input.to_string();
        // The call ends when its plugin is no longer served in the session (changed, removed
        // or no longer granted under `--watch`): it would go on with the withdrawn revision's
        // instance, grants and secrets. Looked at first, so that a revision withdrawn while a
        // hook held the call never runs.
        let withdrawn = self.lock().withdrawal(&ended.serving);
        let called = async {
            tokio::select! {
                biased;
                () = withdrawn => Err(super::catalog::no_longer_served(&ended.meta.name)),
                outcome = ended.tool.call(&input) => outcome,
            }
        };
        let outcome = self
            .run(&ended.call.name, context, asking.questions(), called)
            .await?;
        self.answer(ended, &hooks, &asking, outcome).await
    }

    /// The answer to a `tools/call` whose call ended with `outcome`: the request's
    /// `input_required` if the call deferred questions to the client's retry, or its result
    /// through the operator's post-call hooks.
    pub(super) async fn answer(
        &self,
        ended: Ended<'_>,
        hooks: &crate::call::Hooks<'_>,
        asking: &Asking,
        outcome: Result<ToolOutput, ToolError>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Ended {
            call,
            meta,
            tool,
            asked_as,
            serving,
        } = ended;
        // Sealed for the request as the client sent it (a hook may have renamed the call): its
        // retry names the tool it named.
        if let Some(input_required) = self.input_required(asking, asked_as)? {
            return Ok(CallToolResponse::InputRequired(input_required));
        }
        // A tool that failed after asking what the request's client cannot answer: the
        // protocol's own error, naming the capability (revision 2026-07-28).
        let failed = match &outcome {
            Ok(output) => output.is_error,
            Err(_) => true,
        };
        if failed && let Some(error) = asking.missing_capability() {
            return Err(error);
        }
        // Whose result it is: the tool looked up, whatever a hook renamed the call to.
        let outcome = own_uris(
            || self.lock().plugin_sessions(),
            &serving,
            &meta.name,
            outcome,
        );
        let result = call_result(&call, &meta, outcome);
        let result = hooks
            .after(call, result, &meta, tool)
            .await
            .map_err(|aborted| refused_by_hook(&aborted))?;
        Ok(call_tool_result(result).into())
    }
}

/// A call, as its answer needs it: what runs, the tool's name as the client asked for it, and
/// which group (and plugin) served the tool when the call looked it up.
pub(super) struct Ended<'a> {
    pub(super) call: ToolCall,
    pub(super) meta: Arc<ToolMeta>,
    pub(super) tool: Arc<dyn crate::tool::Tool>,
    pub(super) asked_as: &'a str,
    pub(super) serving: Serving,
}

/// A plugin's result names only its own resources (or URIs no plugin serves): `plugins` (as
/// they stand now) are looked at only for a result that names one. The plugin is the one
/// that served the tool when the call looked it up (`serving`), whatever the catalog did
/// since: a plugin withdrawn while its call ran is still held to the rule. A native group's
/// tools (the operator's code) may name any resource.
pub(super) fn own_uris(
    plugins: impl FnOnce() -> Vec<PluginSession>,
    serving: &Serving,
    tool: &str,
    outcome: Result<ToolOutput, ToolError>,
) -> Result<ToolOutput, ToolError> {
    let output = outcome?;
    if super::offerings::named_uris(&output.content)
        .next()
        .is_none()
    {
        return Ok(output);
    }
    // A native group's tools are the operator's code.
    let Some(plugin) = &serving.plugin else {
        return Ok(output);
    };
    super::offerings::speaks_for_itself(
        &plugins(),
        plugin,
        &format!("the result of tool '{tool}'"),
        super::offerings::named_uris(&output.content),
    )
    .map(|()| output)
    .map_err(ToolError::Internal)
}

/// A call's outcome as the operator's hooks and the client see it.
pub(super) fn call_result(
    call: &ToolCall,
    meta: &ToolMeta,
    outcome: Result<ToolOutput, ToolError>,
) -> ToolResult {
    crate::call::result_of(&call.id, meta, outcome)
}

fn mcp_tool(definition: LlmToolDefinition) -> Tool {
    let shape = crate::provider::mcp_tool(&definition);
    serde_json::from_value(shape).unwrap_or_else(|error| {
        // The shape is ours and rmcp's `Tool` reads it; should they ever disagree, the tool is
        // still listed, by the parts that cannot fail.
        tracing::error!(tool = %definition.name, "cannot describe the tool to MCP: {error}");
        let schema = match definition.input_schema {
            Value::Object(schema) => schema,
            _ => serde_json::Map::new(),
        };
        Tool::new(definition.name, definition.description, Arc::new(schema))
    })
}

/// A result as MCP sends it: the blocks (the text, for a result made of text alone), and the
/// structured value of a success.
pub(super) fn call_tool_result(result: ToolResult) -> CallToolResult {
    let blocks: Vec<ContentBlock> = if result.blocks.is_empty() {
        match result.content.is_empty() {
            true => Vec::new(),
            false => vec![ContentBlock::text(result.content)],
        }
    } else {
        result
            .blocks
            .into_iter()
            .map(super::content::block)
            .collect()
    };
    if result.is_error {
        return CallToolResult::error(blocks);
    }
    let mut success = CallToolResult::success(blocks);
    success.structured_content = result.structured;
    success
}

/// A request failed by a hook's `Abort`.
pub(super) fn refused_by_hook(aborted: &Aborted) -> ErrorData {
    super::session::ended_as("refused");
    ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        format!(
            "the call of '{}' was refused by a hook of this server: {}",
            aborted.call.name, aborted.reason
        ),
        None,
    )
}
