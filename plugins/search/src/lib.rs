//! The spec's `search` example, over a small built-in catalogue.

use llm_worker_guest::{log, progress, tool, tool_registry};

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
    // (It logs what it searches and reports its progress, document by document.)
    #[tool(title = "Search the catalogue", read_only, idempotent)]
    async fn search(
        &self,
        #[description = "検索クエリ文字列"] query: String,
        #[description = "Most results to return (default 3)"] limit: Option<usize>,
    ) -> Result<String, String> {
        let query = query.to_lowercase();
        let limit = limit.unwrap_or(3);
        let total = self.documents.len();
        log::info!("searching {total} documents for {query:?}");
        let mut hits: Vec<String> = Vec::new();
        for (index, (title, body)) in self.documents.iter().enumerate() {
            progress((index + 1) as f64, Some(total as f64), Some(title));
            if hits.len() < limit
                && (title.contains(&query) || body.to_lowercase().contains(&query))
            {
                hits.push(format!("{title}: {body}"));
            }
        }
        log::debug!("{} of {total} documents match", hits.len());
        if hits.is_empty() {
            return Ok(format!("Results for: {query}\n(no documents match)"));
        }
        Ok(format!("Results for: {query}\n{}", hits.join("\n")))
    }
}

llm_worker_guest::export_plugin!(MyApp);

#[cfg(test)]
mod tests {
    use super::*;
    use llm_worker_guest::report::{Report, capture};
    use llm_worker_guest::{ToolRegistry, block_on};

    #[test]
    fn search_logs_and_reports_progress_per_document() {
        let (meta, tool) = MyApp::default().search_definition()();
        assert_eq!(meta.title.as_deref(), Some("Search the catalogue"));
        assert_eq!(meta.annotations.read_only, Some(true));
        let (out, reports) = capture(|| block_on(tool.execute(r#"{"query":"wasm"}"#)));
        assert!(out.is_ok_and(|text| text.contains("wasmtime")));
        let progress: Vec<f64> = reports
            .iter()
            .filter_map(|r| match r {
                Report::Progress { done, total, .. } => {
                    assert_eq!(*total, Some(4.0));
                    Some(*done)
                }
                _ => None,
            })
            .collect();
        assert_eq!(progress, [1.0, 2.0, 3.0, 4.0]);
        assert!(
            matches!(&reports[0], Report::Log { level: log::Level::Info, message }
            if message == "searching 4 documents for \"wasm\"")
        );
        assert_eq!(MyApp::default().tool_definitions().len(), 1);
    }
}
