use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

struct SearchArgs;

#[tool_registry]
impl App {
    #[tool]
    fn search(&self) -> String {
        String::new()
    }
}

fn main() {
    let _ = SearchArgs;
}
