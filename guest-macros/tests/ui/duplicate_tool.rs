use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn lookup(&self) -> String {
        String::new()
    }

    #[tool]
    fn lookup(&self, key: String) -> String {
        key
    }
}

fn main() {}
