use llm_worker_guest::{description, tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[description = "Finds things"]
    #[tool]
    fn find(&self) -> String {
        String::new()
    }
}

fn main() {}
