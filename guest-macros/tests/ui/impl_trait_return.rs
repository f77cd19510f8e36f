use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn find(&self) -> impl std::fmt::Display {
        5
    }
}

fn main() {}
