//! `llm-worker serve`: the tools of a plugin directory as an MCP server over stdio. One
//! connection is one session: one instance per plugin, state kept between calls.

use std::sync::Arc;

use llm_worker::{ToolServerError, ToolServerHandle};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

/// Serves a worker's tools.
pub(crate) struct McpServer {
    pub(crate) tools: ToolServerHandle,
    pub(crate) instructions: String,
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.instructions = Some(self.instructions.clone());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .tools
            .tool_definitions_sorted()
            .into_iter()
            .map(|definition| {
                let schema = match definition.input_schema {
                    Value::Object(schema) => schema,
                    _ => serde_json::Map::new(),
                };
                Tool::new(definition.name, definition.description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let input = Value::Object(request.arguments.unwrap_or_default()).to_string();
        match self.tools.call_tool(&request.name, &input).await {
            Ok(output) => Ok(CallToolResult::success(vec![ContentBlock::text(output)]).into()),
            Err(ToolServerError::ToolNotFound(name)) => Err(ErrorData::invalid_params(
                format!("no tool named '{name}'; call tools/list for the tools"),
                None,
            )),
            // A tool's failure is a result the model can read, not a protocol error.
            Err(error) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(error.to_string())]).into())
            }
        }
    }
}
