use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn search(&self) -> String {
        String::new()
    }

    fn search_definition(&self) {}
}

fn main() {}
