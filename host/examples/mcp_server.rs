//! An application serving its own tools over MCP (streamable HTTP): a native Rust tool and the
//! plugins of a directory, each MCP session with its own state.
//!
//! ```sh
//! cargo run -p llm-worker --features mcp-http --example mcp_server -- target/demo-plugins
//! ```
//!
//! then point an MCP client at `http://127.0.0.1:8080/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use llm_worker::mcp::{HttpOptions, McpOptions, ToolCatalog, ToolGroup};
use llm_worker::{PluginHost, Tool, ToolDefinition, ToolError, ToolMeta};
use serde_json::json;

/// A native tool: counts its calls, per session.
struct Visits(AtomicUsize);

#[async_trait]
impl Tool for Visits {
    async fn execute(&self, _input_json: &str) -> Result<String, ToolError> {
        Ok(self.0.fetch_add(1, Ordering::SeqCst).to_string())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/demo-plugins".into());
    let host = PluginHost::new()?;
    let plugins = host.load_dir(&dir)?;
    for failure in &plugins.failures {
        eprintln!("warning: {failure}");
    }

    // One group of native tools (its factory runs once per session) and one per plugin.
    let visits = ToolGroup::new("native", 1, || {
        let definition: ToolDefinition = Arc::new(|| {
            let meta = ToolMeta::new("visits")
                .description("How many times this session called me")
                .input_schema(json!({"type": "object"}));
            (meta, Arc::new(Visits(AtomicUsize::new(0))) as Arc<dyn Tool>)
        });
        vec![definition]
    });
    let catalog = ToolCatalog::new(
        std::iter::once(visits).chain(plugins.plugins.iter().map(ToolGroup::plugin)),
    );

    // Local users are not trusted either: clients need a token, kept across restarts.
    let token_path = llm_worker::mcp::default_token_path().ok_or("no HOME to keep a token in")?;
    let token = llm_worker::mcp::persistent_token(&token_path)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    println!("serving MCP on http://{}/", listener.local_addr()?);
    println!("clients send `Authorization: Bearer {token}`");
    llm_worker::mcp::serve_http(
        listener,
        catalog,
        McpOptions::new("my-app", "1.0.0"),
        HttpOptions::default().tokens([token]).max_sessions(16),
    )
    .await?;
    Ok(())
}
