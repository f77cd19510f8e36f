use llm_worker_guest::{tool as expose, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[expose]
    fn renamed(&self) -> String {
        String::new()
    }
}

fn main() {}
