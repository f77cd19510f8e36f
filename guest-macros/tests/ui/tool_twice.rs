use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    #[tool(read_only)]
    fn find(&self) -> String {
        String::new()
    }
}

fn main() {}
