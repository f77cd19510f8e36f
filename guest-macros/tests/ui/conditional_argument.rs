use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    /// Greets.
    #[tool]
    fn greet(&self, #[cfg(test)] loud: bool, name: String) -> String {
        name
    }
}

fn main() {}
