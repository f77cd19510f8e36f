use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn echo<T: std::fmt::Debug>(&self, value: T) -> String {
        format!("{value:?}")
    }
}

fn main() {}
