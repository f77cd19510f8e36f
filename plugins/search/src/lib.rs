//! The spec's `search` example, over a small built-in catalogue.

use llm_worker_guest::{tool, tool_registry};

/// Searches a fixed catalogue of documents.
#[derive(Clone)]
pub struct MyApp {
    documents: Vec<(&'static str, &'static str)>,
}

impl Default for MyApp {
    fn default() -> Self {
        Self {
            documents: vec![
                ("wasmtime", "A fast and secure runtime for WebAssembly"),
                ("wasi", "The WebAssembly System Interface"),
                (
                    "component model",
                    "Composable, language-neutral WebAssembly components",
                ),
                ("mcp", "The Model Context Protocol for tools and resources"),
            ],
        }
    }
}

#[tool_registry]
impl MyApp {
    /// 検索を実行する
    /// 指定されたクエリでデータベースを検索します。
    #[tool]
    async fn search(
        &self,
        #[description = "検索クエリ文字列"] query: String,
        #[description = "Most results to return (default 3)"] limit: Option<usize>,
    ) -> Result<String, String> {
        let query = query.to_lowercase();
        let hits: Vec<String> = self
            .documents
            .iter()
            .filter(|(title, body)| title.contains(&query) || body.to_lowercase().contains(&query))
            .take(limit.unwrap_or(3))
            .map(|(title, body)| format!("{title}: {body}"))
            .collect();
        if hits.is_empty() {
            return Ok(format!("Results for: {query}\n(no documents match)"));
        }
        Ok(format!("Results for: {query}\n{}", hits.join("\n")))
    }
}

llm_worker_guest::export_plugin!(MyApp);
