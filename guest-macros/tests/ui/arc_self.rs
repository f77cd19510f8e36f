use std::sync::Arc;

use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn shared(self: Arc<Self>) -> String {
        String::new()
    }
}

fn main() {}
