//! The spec's example tool: greets someone.

use llm_worker_guest::{tool, tool_registry};

/// The greeting tools.
#[derive(Clone, Default)]
pub struct App;

#[tool_registry]
impl App {
    /// 挨拶する
    /// Greets someone by name.
    #[tool]
    async fn greet(&self, #[description = "名前 (the name to greet)"] name: String) -> String {
        format!("Hello, {}!", name)
    }
}

llm_worker_guest::export_plugin!(App);

#[cfg(test)]
mod tests {
    use super::*;
    use llm_worker_guest::block_on;

    #[test]
    fn greets_with_the_text_as_it_is() {
        let (meta, tool) = App.greet_definition()();
        assert_eq!(meta.name, "greet");
        let out = block_on(tool.execute(r#"{"name":"Ada"}"#));
        assert_eq!(out, Ok("Hello, Ada!".to_owned()));
    }
}
