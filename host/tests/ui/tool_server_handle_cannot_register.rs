use std::sync::Arc;

use llm_worker::{Tool, ToolDefinition, ToolError, ToolMeta, Worker};

struct Nop;

#[async_trait::async_trait]
impl Tool for Nop {
    async fn execute(&self, _: &str) -> Result<String, ToolError> {
        Ok(String::new())
    }
}

fn main() {
    let def: ToolDefinition = Arc::new(|| (ToolMeta::new("nop"), Arc::new(Nop) as Arc<dyn Tool>));
    let handle = Worker::new().tool_server_handle();
    handle.register_tool(def).unwrap();
}
