use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn mutate(&mut self) -> String {
        String::new()
    }
}

fn main() {}
