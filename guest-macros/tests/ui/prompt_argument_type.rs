use llm_worker_guest::{prompt, tool_registry};

#[derive(Clone, Default)]
struct App;

#[tool_registry]
impl App {
    /// Asks for a list.
    #[prompt(title = "List", style = "short")]
    fn list(&self, count: u32, topic: &str, note: Option<u8>) -> String {
        format!("{count}{topic}{note:?}")
    }
}

fn main() {}
